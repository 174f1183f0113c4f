"""Request building, shared by `MemstreamClient` and `AsyncMemstreamClient`: one `Call` per API
operation says what to send, how to read the answer and whether it is idempotent (the retry rules
of `memstream.client.retry` depend on it).

Idempotence, per call: every GET; appends (every message carries a `message_id`: ids missing from
the caller's messages are generated here, once, before the first attempt, so a retry sends the same
ids and gets the same stored messages back); thread PUT and PATCH (a JSON Merge Patch applied twice
merges to the same metadata); thread DELETE (a repeat answers the same report); user DELETE (a
repeat erases what the user wrote since: nothing, a report of zeros); agent PUT; entry PATCH (sets
fields); the tools `memory_store` (storing again under a key replaces the entry with the same
content), `memory_recall`, `journal_message_search`, `journal_tool_call_view` (reads) and
`memory_forget` with an explicit `scope` (a repeat finds nothing to forget). Not idempotent:
`memory_forget` without `scope` (after the private entry is gone, a repeat forgets the shared one),
deleting an entry by id (a repeat is 404) and any other tool name.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx

from core.memory.models import Category, MemoryEntry, Visibility
from core.memory.tools import FORGET, RECALL, STORE, ToolSpec
from core.turn_context import Context
from memstream.client.models import (
    Agent,
    AppendResult,
    EditResult,
    MemoryPage,
    MessagesPage,
    NewMessage,
    Thread,
    ThreadDeletion,
    ToolResult,
    UserErasure,
)

T = TypeVar("T")

JOURNAL_SEARCH = "journal_message_search"
JOURNAL_VIEW = "journal_tool_call_view"
_REPEATABLE_TOOLS = frozenset({RECALL, JOURNAL_SEARCH, JOURNAL_VIEW, STORE})

Params = dict[str, str | int | bool]
MessageInput = NewMessage | Mapping[str, Any]
"""A message to append: a `NewMessage`, or a dict of the same fields (validated by the server)."""


@dataclass(frozen=True)
class Call(Generic[T]):
    """One API operation: request line, query, JSON body, how to parse a 2xx answer, idempotence."""

    method: str
    path: str
    parse: Callable[[httpx.Response], T]
    idempotent: bool
    params: Params | None = None
    body: Any = None


def new_message_id() -> str:
    """A fresh message id (`m-` and 32 hex digits: within the API's id rules)."""
    return f"m-{uuid.uuid4().hex}"


def _seg(value: str) -> str:
    """One path segment, percent-encoded (ids are validated by the server; nothing escapes the path)."""
    return quote(value, safe="")


def _query(**values: str | int | bool | None) -> Params:
    return {name: value for name, value in values.items() if value is not None}


def _model(model: type[Any]) -> Callable[[httpx.Response], Any]:
    return lambda response: model.model_validate_json(response.content)


def _nothing(response: httpx.Response) -> None:
    return None


def _tools(response: httpx.Response) -> list[ToolSpec]:
    return [ToolSpec.model_validate(tool) for tool in response.json()["tools"]]


def _jsonl_entries(response: httpx.Response) -> list[MemoryEntry]:
    return [MemoryEntry.model_validate_json(line) for line in response.content.splitlines() if line.strip()]


def _with_id(message: MessageInput, id_factory: Callable[[], str]) -> dict[str, Any]:
    if isinstance(message, NewMessage):
        body = message.model_dump(mode="json", exclude_none=True)
    else:
        body = dict(message)
    if body.get("message_id") is None:
        body["message_id"] = id_factory()
    return body


def append(
    thread_id: str,
    messages: Sequence[MessageInput],
    *,
    agent_id: str | None,
    user_id: str | None,
    id_factory: Callable[[], str] = new_message_id,
) -> Call[AppendResult]:
    body: dict[str, Any] = {"messages": [_with_id(m, id_factory) for m in messages]}
    if agent_id is not None:
        body["agent_id"] = agent_id
    if user_id is not None:
        body["user_id"] = user_id
    return Call("POST", f"/v1/threads/{_seg(thread_id)}/messages", _model(AppendResult), True, body=body)


def read_messages(thread_id: str, *, after: int, limit: int) -> Call[MessagesPage]:
    path = f"/v1/threads/{_seg(thread_id)}/messages"
    return Call("GET", path, _model(MessagesPage), True, params=_query(after=after, limit=limit))


def get_context(thread_id: str, *, as_subagent: bool, at_offset: int | None = None) -> Call[Context]:
    params = _query(as_subagent=True if as_subagent else None, at_offset=at_offset) or None
    return Call("GET", f"/v1/threads/{_seg(thread_id)}/context", _model(Context), True, params=params)


def _thread(response: httpx.Response) -> Thread:
    thread = Thread.model_validate_json(response.content)
    return thread.model_copy(update={"created": response.status_code == 201})


def put_thread(
    thread_id: str, *, agent_id: str, user_id: str | None, metadata: Mapping[str, Any] | None
) -> Call[Thread]:
    body = {"agent_id": agent_id, "user_id": user_id, "metadata": dict(metadata or {})}
    return Call("PUT", f"/v1/threads/{_seg(thread_id)}", _thread, True, body=body)


def get_thread(thread_id: str) -> Call[Thread]:
    return Call("GET", f"/v1/threads/{_seg(thread_id)}", _model(Thread), True)


def delete_thread(thread_id: str) -> Call[ThreadDeletion]:
    return Call("DELETE", f"/v1/threads/{_seg(thread_id)}", _model(ThreadDeletion), True)


def erase_user(user_id: str) -> Call[UserErasure]:
    return Call("DELETE", f"/v1/users/{_seg(user_id)}", _model(UserErasure), True)


def patch_thread(thread_id: str, metadata: Mapping[str, Any]) -> Call[Thread]:
    body = {"metadata": dict(metadata)}
    return Call("PATCH", f"/v1/threads/{_seg(thread_id)}", _model(Thread), True, body=body)


def bind_agent(agent_id: str, capabilities: Sequence[str]) -> Call[Agent]:
    body = {"capabilities": list(capabilities)}
    return Call("PUT", f"/v1/agents/{_seg(agent_id)}", _model(Agent), True, body=body)


def get_agent(agent_id: str) -> Call[Agent]:
    return Call("GET", f"/v1/agents/{_seg(agent_id)}", _model(Agent), True)


def list_tools(agent_id: str, *, user_id: str | None) -> Call[list[ToolSpec]]:
    path = f"/v1/agents/{_seg(agent_id)}/tools"
    return Call("GET", path, _tools, True, params=_query(user_id=user_id))


def tool_is_idempotent(tool: str, arguments: Mapping[str, Any] | str) -> bool:
    """Whether repeating this tool call changes nothing (see the module doc)."""
    if tool in _REPEATABLE_TOOLS:
        return True
    if tool != FORGET:
        return False
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return True  # refused as invalid (422) by the server: nothing to repeat
        if not isinstance(arguments, dict):
            return True
    return arguments.get("scope") is not None


def call_tool(
    agent_id: str,
    tool: str,
    arguments: Mapping[str, Any] | str,
    *,
    user_id: str | None,
    thread_id: str | None,
) -> Call[ToolResult]:
    body: dict[str, Any] = {"arguments": arguments if isinstance(arguments, str) else dict(arguments)}
    if user_id is not None:
        body["user_id"] = user_id
    if thread_id is not None:
        body["thread_id"] = thread_id
    path = f"/v1/agents/{_seg(agent_id)}/tools/{_seg(tool)}"
    return Call("POST", path, _model(ToolResult), tool_is_idempotent(tool, arguments), body=body)


def tool_arguments(**values: Any) -> dict[str, Any]:
    """A tool's arguments without the ones left at None (the server applies their defaults)."""
    return {name: value for name, value in values.items() if value is not None}


def list_memory(
    agent_id: str,
    *,
    user_id: str | None,
    category: Category | None,
    key_prefix: str | None,
    visibility: Visibility | None,
    include_expired: bool,
    limit: int,
    cursor: str | None,
) -> Call[MemoryPage]:
    params = _query(
        user_id=user_id,
        category=category,
        key_prefix=key_prefix,
        visibility=visibility,
        include_expired=include_expired or None,
        limit=limit,
        cursor=cursor,
    )
    return Call("GET", f"/v1/agents/{_seg(agent_id)}/memory", _model(MemoryPage), True, params=params)


def _entry_path(agent_id: str, entry_id: str) -> str:
    return f"/v1/agents/{_seg(agent_id)}/memory/{_seg(entry_id)}"


def get_memory(agent_id: str, entry_id: str, *, user_id: str | None) -> Call[MemoryEntry]:
    path = _entry_path(agent_id, entry_id)
    return Call("GET", path, _model(MemoryEntry), True, params=_query(user_id=user_id))


def edit_memory(
    agent_id: str,
    entry_id: str,
    *,
    user_id: str | None,
    key: str | None,
    content: str | None,
    category: Category | None,
    importance: float | None,
) -> Call[EditResult]:
    body = tool_arguments(key=key, content=content, category=category, importance=importance)
    path = _entry_path(agent_id, entry_id)
    return Call("PATCH", path, _model(EditResult), True, params=_query(user_id=user_id), body=body)


def delete_memory(agent_id: str, entry_id: str, *, user_id: str | None) -> Call[None]:
    path = _entry_path(agent_id, entry_id)
    return Call("DELETE", path, _nothing, False, params=_query(user_id=user_id))


def export_memory(agent_id: str, *, user_id: str | None, include_expired: bool) -> Call[list[MemoryEntry]]:
    params = _query(user_id=user_id, include_expired=include_expired or None)
    return Call("GET", f"/v1/agents/{_seg(agent_id)}/memory/export", _jsonl_entries, True, params=params)
