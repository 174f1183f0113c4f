"""The agent-memory tools: `memory_store`, `memory_recall`, `memory_forget`.

`tools_for(capabilities)` gives the OpenAI function-calling definitions an agent is offered:
exactly these three when its capabilities include Memory (`MEMORY_CAPABILITY`), none otherwise.
`MemoryTools.invoke(name, arguments, context)` runs one call for an agent whose binding includes
Memory (`MemoryNotBound` otherwise): the arguments (a JSON object or its JSON text, as models
send them) are validated first, and a bad argument raises `InvalidInput` naming it
(`arguments.importance`) before anything is written.

Results are plain JSON objects for the model:
- `memory_store`: the effective visibility (`private` asked without a user is stored `shared`;
  credentials/PII and `user_profile` facts force `private`, and a `user_profile` fact without a
  user is refused; the result says so in `note`), and what happened (`created`, `replaced`,
  `unchanged`);
- `memory_recall`: `path` (`qdrant` or `postgres_fts`), the `limit` applied (a limit above 20 is
  capped at 20, with a `note`; below 1 is an error) and the entries with their final scores;
- `memory_forget`: what was removed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from core.errors import Conflict, InvalidInput, NotFound
from core.inputs import loads_json
from core.memory.checks import MAX_KEY_PREFIX_CHARS
from core.memory.models import (
    CATEGORIES,
    DEFAULT_IMPORTANCE,
    LIMITS,
    MEMORY_CAPABILITY,
    RECALL_DEFAULT_LIMIT,
    RECALL_MAX_LIMIT,
    Category,
    MemoryEntry,
    MemoryScope,
    Provenance,
    Visibility,
)
from core.memory.recall import MAX_QUERY_CHARS, RecallResult
from core.memory.service import ForgetResult, StoreResult

STORE = "memory_store"
RECALL = "memory_recall"
FORGET = "memory_forget"
TOOL_NAMES = (STORE, RECALL, FORGET)
MAX_KEY_CHARS = 200
_MAX_CONTENT_CHARS = max(limit.max_chars for limit in LIMITS.values())


class MemoryNotBound(Conflict):
    """The agent's capability binding does not include Memory: its memory tools cannot be called."""

    code = "capability_not_bound"


class UnknownTool(NotFound):
    code = "unknown_tool"


class FunctionSpec(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    description: str
    parameters: dict[str, Any]


class ToolSpec(BaseModel):
    """One tool definition in the OpenAI function-calling format (`tools=[...]`)."""

    model_config = ConfigDict(frozen=True)

    type: Literal["function"] = "function"
    function: FunctionSpec


class ToolContext(BaseModel):
    """Who calls: the memory scope (the user, when there is one) and the thread, when known."""

    model_config = ConfigDict(frozen=True)

    scope: MemoryScope
    thread_id: str | None = None


# ---- argument models (validation) -------------------------------------------------------------


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class StoreArgs(_Args):
    key: str = Field(min_length=1, max_length=MAX_KEY_CHARS)
    content: str = Field(min_length=1, max_length=_MAX_CONTENT_CHARS)
    category: Category
    scope: Visibility = "private"
    importance: float = Field(default=DEFAULT_IMPORTANCE, ge=0.0, le=1.0)


class RecallArgs(_Args):
    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS)
    limit: int = Field(default=RECALL_DEFAULT_LIMIT, ge=1)
    """Capped at RECALL_MAX_LIMIT by the recaller (not an error)."""
    category: Category | None = None
    key_prefix: str | None = Field(default=None, min_length=1, max_length=MAX_KEY_PREFIX_CHARS)


class ForgetArgs(_Args):
    key: str = Field(min_length=1, max_length=MAX_KEY_CHARS)
    scope: Visibility | None = None


_ARGS: dict[str, type[_Args]] = {STORE: StoreArgs, RECALL: RecallArgs, FORGET: ForgetArgs}


def parse_arguments(name: str, arguments: str | Mapping[str, Any]) -> _Args:
    """The validated arguments of tool `name`; InvalidInput naming the first bad argument."""
    model = _ARGS.get(name)
    if model is None:
        raise UnknownTool(f"no tool {name!r}: the memory tools are {', '.join(TOOL_NAMES)}")
    if isinstance(arguments, str):
        arguments = loads_json(arguments, "arguments") if arguments.strip() else {}
    if not isinstance(arguments, Mapping):
        raise InvalidInput("arguments must be a JSON object", field="arguments")
    try:
        return model.model_validate(dict(arguments))
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(part) for part in err["loc"])
        field = f"arguments.{loc}" if loc else "arguments"
        kind = err["type"]
        if kind == "extra_forbidden":
            allowed = ", ".join(model.model_fields)
            message = f"{field}: unknown argument for {name} (allowed: {allowed})"
        elif kind == "missing":
            message = f"{field}: required by {name}"
        else:
            message = f"{field}: {err['msg']}"
        raise InvalidInput(message, field=field) from None


# ---- definitions ------------------------------------------------------------------------------

_CATEGORY_DOC = (
    "user_profile: lasting facts about the user (name, preferences, role), always private to the "
    "current user and only possible when the conversation has a user; "
    "project_fact: facts about the work or project; "
    "observation: short-lived notes (they expire after 30 days)."
)
_SCOPE_DOC = (
    "private: only for the current user (the default); shared: visible to every user of this "
    "agent. Without a user in the conversation, private entries are stored as shared. Credentials "
    "and personal data are always stored private."
)


def _schema(properties: dict[str, Any], required: Sequence[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(required),
        "additionalProperties": False,
    }


_KEY = {
    "type": "string",
    "minLength": 1,
    "maxLength": MAX_KEY_CHARS,
    "description": "A short stable name for the fact, e.g. 'user.name' or 'project.deadline'. "
    "Storing again under the same key replaces the entry.",
}

STORE_SPEC = ToolSpec(
    function=FunctionSpec(
        name=STORE,
        description="Remember a fact across conversations. Use it for information worth keeping "
        "(who the user is, what they prefer, facts about their work), not for the conversation "
        "itself. The result says the visibility the entry was stored with.",
        parameters=_schema(
            {
                "key": _KEY,
                "content": {
                    "type": "string",
                    "minLength": 1,
                    "description": "The fact, in one or a few sentences. At most 2,000 characters "
                    "(4,000 for project_fact).",
                },
                "category": {"type": "string", "enum": list(CATEGORIES), "description": _CATEGORY_DOC},
                "scope": {
                    "type": "string",
                    "enum": ["private", "shared"],
                    "default": "private",
                    "description": _SCOPE_DOC,
                },
                "importance": {
                    "type": "number",
                    "minimum": 0.0,
                    "maximum": 1.0,
                    "default": DEFAULT_IMPORTANCE,
                    "description": "How much the fact matters, 0.0-1.0 (default 0.5). user_profile "
                    "facts of importance 0.7 or more are shown at the start of every conversation "
                    "with that user.",
                },
            },
            ["key", "content", "category"],
        ),
    )
)

RECALL_SPEC = ToolSpec(
    function=FunctionSpec(
        name=RECALL,
        description="Search remembered facts by meaning and keywords. Returns the best matches, "
        "most relevant first, with their keys, categories and scores.",
        parameters=_schema(
            {
                "query": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_QUERY_CHARS,
                    "description": "What to look for, in natural language.",
                },
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "default": RECALL_DEFAULT_LIMIT,
                    "description": f"How many facts to return (default {RECALL_DEFAULT_LIMIT}); at "
                    f"most {RECALL_MAX_LIMIT} are returned, a larger value is capped at "
                    f"{RECALL_MAX_LIMIT}.",
                },
                "category": {
                    "type": "string",
                    "enum": list(CATEGORIES),
                    "description": "Only facts of this category.",
                },
                "key_prefix": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_KEY_PREFIX_CHARS,
                    "description": "Only facts whose key starts with this, e.g. 'project.'.",
                },
            },
            ["query"],
        ),
    )
)

FORGET_SPEC = ToolSpec(
    function=FunctionSpec(
        name=FORGET,
        description="Delete a remembered fact by its key, e.g. when the user asks you to forget "
        "it or it is no longer true.",
        parameters=_schema(
            {
                "key": {**_KEY, "description": "The key of the fact to delete."},
                "scope": {
                    "type": "string",
                    "enum": ["private", "shared"],
                    "description": "Which entry the key names: the current user's private one or "
                    "the agent's shared one. Omit it to forget the private one when there is one, "
                    "else the shared one.",
                },
            },
            ["key"],
        ),
    )
)

MEMORY_TOOLS: tuple[ToolSpec, ...] = (STORE_SPEC, RECALL_SPEC, FORGET_SPEC)


def tools_for(capabilities: Sequence[str]) -> list[ToolSpec]:
    """The tools offered to an agent with these capabilities: the three memory tools iff Memory."""
    return list(MEMORY_TOOLS) if MEMORY_CAPABILITY in capabilities else []


# ---- results ----------------------------------------------------------------------------------


def entry_view(entry: MemoryEntry) -> dict[str, Any]:
    """An entry as the model sees it."""
    return {
        "entry_id": entry.entry_id,
        "key": entry.key,
        "content": entry.content,
        "category": entry.category,
        "visibility": entry.visibility,
        "importance": entry.importance,
    }


def recall_view(result: RecallResult) -> dict[str, Any]:
    out: dict[str, Any] = {
        "path": result.path,
        "limit": result.limit,
        "count": len(result.hits),
        "results": [{**entry_view(hit.entry), "score": round(hit.score, 6)} for hit in result.hits],
    }
    if result.note is not None:
        out["note"] = result.note
    return out


# ---- invocation -------------------------------------------------------------------------------


class ToolStore(Protocol):
    """The part of `MemoryService` the tools need."""

    async def store(
        self,
        scope: MemoryScope,
        key: str,
        content: str,
        category: str,
        *,
        scope_visibility: str,
        importance: float = ...,
        source: Provenance | None = None,
    ) -> StoreResult: ...

    async def forget(
        self, scope: MemoryScope, key: str, *, visibility: str | None = None
    ) -> ForgetResult: ...


class ToolRecaller(Protocol):
    async def recall(
        self,
        scope: MemoryScope,
        query: str,
        *,
        limit: int = ...,
        category: str | None = None,
        key_prefix: str | None = None,
    ) -> RecallResult: ...


class MemoryTools:
    """Runs the memory tools over the memory service and the recaller.

    `invoke` does not look at capability bindings: the caller (the HTTP route) checks that the
    agent has Memory bound (`MemoryNotBound`) before invoking.
    """

    def __init__(self, service: ToolStore, recaller: ToolRecaller) -> None:
        self._service = service
        self._recaller = recaller

    async def invoke(
        self, name: str, arguments: str | Mapping[str, Any], context: ToolContext
    ) -> dict[str, Any]:
        """Validate `arguments` for tool `name` and run it; the JSON result for the model."""
        args = parse_arguments(name, arguments)
        if isinstance(args, StoreArgs):
            return await self._store(args, context)
        if isinstance(args, RecallArgs):
            result = await self._recaller.recall(
                context.scope,
                args.query,
                limit=args.limit,
                category=args.category,
                key_prefix=args.key_prefix,
            )
            return recall_view(result)
        assert isinstance(args, ForgetArgs)
        forgotten = await self._service.forget(context.scope, args.key, visibility=args.scope)
        out: dict[str, Any] = {"forgotten": forgotten.forgotten, "key": args.key}
        if forgotten.entry is not None:
            out["entry_id"] = forgotten.entry.entry_id
            out["visibility"] = forgotten.entry.visibility
        else:
            out["note"] = f"no entry with key {args.key!r} is visible to this caller"
        return out

    async def _store(self, args: StoreArgs, context: ToolContext) -> dict[str, Any]:
        source = None if context.thread_id is None else Provenance(thread_id=context.thread_id)
        result = await self._service.store(
            context.scope,
            args.key,
            args.content,
            args.category,
            scope_visibility=args.scope,
            importance=args.importance,
            source=source,
        )
        return {
            "outcome": result.outcome,
            "requested_visibility": args.scope,
            "visibility": result.effective_visibility,
            "notes": list(result.notes),
            "entry": entry_view(result.entry),
        }
