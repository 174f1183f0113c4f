"""The journal tools as an agent is offered them: OpenAI function-calling definitions and one
entry point to run a call.

They are not part of the Memory capability: `JournalTools.offered(principal)` gives both
definitions to every caller on an agent surface (`Principal.on_agent_surface`), whether or not
the agent has Memory bound, and none to a caller whose key was issued to an MCP gateway; for
that caller the tools do not exist (the route answers 404 `unknown_tool`, as for any other name).

A store that cannot answer right now (`TranscriptUnavailable`) surfaces as
`TranscriptsUnavailable` (HTTP 503 `transcripts_unavailable`): retry later.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from core.auth import Principal
from core.chat.base import ChatModel
from core.errors import JournalUnavailable
from core.memory.tools import FunctionSpec, ToolSpec, UnknownTool
from core.stores.transcripts import TranscriptStore, TranscriptUnavailable
from core.transcripts.caller import JournalContext
from core.transcripts.rerank import DenseRerank
from core.transcripts.search import (
    ALL_THREADS,
    DEFAULT_LIMIT,
    MAX_LIMIT,
    MAX_QUERY_CHARS,
    SCOPES,
    SEARCH,
    TranscriptSearch,
)
from core.transcripts.tool_call_view import MAX_PAGE_BYTES, PARTS, VIEW, ToolCallViewer

JOURNAL_TOOL_NAMES = (SEARCH, VIEW)


def _schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


SEARCH_SPEC = ToolSpec(
    function=FunctionSpec(
        name=SEARCH,
        description="Search your earlier conversations with this user (or, without a user, your "
        "conversations that have no user) for user and assistant messages matching a query. By "
        "default returns, per matching conversation, a short summary of what the matches say plus "
        "references to the matching messages; with summarize=false returns the matching messages "
        "themselves.",
        parameters=_schema(
            {
                "query": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_QUERY_CHARS,
                    "description": "Words to look for (keywords work best), e.g. 'invoice refund March'.",
                },
                "scope": {
                    "type": "string",
                    "enum": list(SCOPES),
                    "default": ALL_THREADS,
                    "description": "all_threads: every earlier conversation (default); current_thread: "
                    "only this conversation.",
                },
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_LIMIT,
                    "default": DEFAULT_LIMIT,
                    "description": f"How many matching messages at most, 1-{MAX_LIMIT} (default "
                    f"{DEFAULT_LIMIT}).",
                },
                "summarize": {
                    "type": "boolean",
                    "default": True,
                    "description": "true: one summary per matching conversation (default); false: the "
                    "matching messages in full.",
                },
                "after": {
                    "type": "string",
                    "description": "Only messages written at or after this time: an ISO 8601 date "
                    "(e.g. 2024-05-01) or date and time (e.g. 2024-05-01T10:00:00Z).",
                },
                "before": {
                    "type": "string",
                    "description": "Only messages written before this time (ISO 8601 date or date and time).",
                },
            },
            ["query"],
        ),
    )
)

VIEW_SPEC = ToolSpec(
    function=FunctionSpec(
        name=VIEW,
        description="Read the full result (or arguments) of an earlier tool call by its id, page by "
        f"page: at most {MAX_PAGE_BYTES} bytes per call. Keep calling with offset=next_offset until "
        "next_offset is null to read everything. An id can repeat within a conversation (some servers "
        "reuse ids such as call_0 every turn): each repetition is a separate call; the most recent one "
        "is read unless `occurrence` picks another, and the result says which (`occurrence` of "
        "`occurrences`).",
        parameters=_schema(
            {
                "tool_call_id": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": 128,
                    "description": "The id of the tool call (the `id` in the assistant's tool call).",
                },
                "part": {
                    "type": "string",
                    "enum": list(PARTS),
                    "default": "result",
                    "description": "result: what the tool returned (default); arguments: what it was called "
                    "with.",
                },
                "offset": {
                    "type": "integer",
                    "minimum": 0,
                    "default": 0,
                    "description": "Byte offset to start at (UTF-8 bytes; use the next_offset of the "
                    "previous page).",
                },
                "length": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_PAGE_BYTES,
                    "default": MAX_PAGE_BYTES,
                    "description": f"Bytes to read, 1-{MAX_PAGE_BYTES} (default {MAX_PAGE_BYTES}); a page "
                    "never splits a character, so it may hold a few bytes less.",
                },
                "thread_id": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": 128,
                    "description": "The conversation holding the call; needed only when the same id "
                    "occurs in several conversations.",
                },
                "occurrence": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "Which call with this id in the conversation, when the id repeats "
                    "there: 1 is the first; omit it for the most recent. Keep the same value while "
                    "paging.",
                },
            },
            ["tool_call_id"],
        ),
    )
)

JOURNAL_TOOLS: tuple[ToolSpec, ...] = (SEARCH_SPEC, VIEW_SPEC)


class TranscriptsUnavailable(JournalUnavailable):
    """The transcript store (the ClickHouse projection of the journal) cannot be read right now."""

    code = "transcripts_unavailable"


class JournalTools:
    """Both journal tools over one transcript store and chat model."""

    def __init__(self, search: TranscriptSearch, viewer: ToolCallViewer) -> None:
        self.search = search
        self.viewer = viewer

    @classmethod
    def build(
        cls, store: TranscriptStore, model: ChatModel, rerank: DenseRerank | None = None
    ) -> JournalTools:
        """The standard wiring over the process's transcript store and chat model (and the dense
        re-rank of search when `settings.transcript_vectors` is on). Does no I/O."""
        return cls(TranscriptSearch(store, model, rerank=rerank), ToolCallViewer(store))

    @staticmethod
    def offered(caller: Principal) -> list[ToolSpec]:
        """The journal tool definitions `caller` is offered: both on an agent surface, none else."""
        return list(JOURNAL_TOOLS) if caller.on_agent_surface else []

    @staticmethod
    def names_for(caller: Principal) -> tuple[str, ...]:
        return JOURNAL_TOOL_NAMES if caller.on_agent_surface else ()

    async def invoke(
        self, name: str, arguments: str | Mapping[str, Any], context: JournalContext
    ) -> dict[str, Any]:
        """Validate `arguments` for tool `name` and run it; the JSON result for the model. The caller
        (the route) checks the surface first."""
        try:
            if name == SEARCH:
                return await self.search.invoke(arguments, context)
            if name == VIEW:
                return await self.viewer.invoke(arguments, context)
        except TranscriptUnavailable as exc:
            raise TranscriptsUnavailable(
                f"the transcript store cannot be read right now ({exc}); retry later"
            ) from exc
        raise UnknownTool(f"no journal tool {name!r}: the journal tools are {', '.join(JOURNAL_TOOL_NAMES)}")
