"""The results the client returns: the server's own models where they live in `core` (`Message`,
`MemoryEntry`, `ToolSpec`, `Context`), and small mirrors of the API's response bodies
(`memstream.api.schemas`, which the client does not import: it would pull in the whole server).

The mirrors keep the server's field names and types (a unit test compares them with the API's
schemas); unknown fields are ignored, so a newer server does not break an older client.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from core.journal.models import Message, NewMessage, ToolCall
from core.memory.models import Category, MemoryEntry, Visibility
from core.memory.tools import ToolSpec
from core.turn_context import Context, ContextMessage

__all__ = [
    "Agent",
    "AppendResult",
    "Category",
    "Context",
    "ContextMessage",
    "EditResult",
    "MemoryEntry",
    "MemoryPage",
    "Message",
    "MessagesPage",
    "NewMessage",
    "Thread",
    "ToolCall",
    "ToolResult",
    "ToolSpec",
    "Visibility",
    "chat_messages",
    "tool_definitions",
]


class _Result(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class Thread(_Result):
    """A thread (`ThreadResponse`)."""

    thread_id: str
    environment: str
    account_id: str
    agent_id: str
    user_id: str | None
    metadata: dict[str, Any]
    window_size: int
    created_at: datetime
    updated_at: datetime
    created: bool = Field(default=False, description="client only: this PUT created the thread (201)")


class ThreadDeletion(_Result):
    """What deleting a thread deleted where (`ThreadDeletionResponse`)."""

    thread_id: str
    deletion_id: int
    requested_at: datetime
    completed_at: datetime | None
    up_to_seq: int
    deleted: dict[str, Any]


class UserErasure(_Result):
    """What erasing a user erased where (`UserErasureResponse`): `erased["threads"]` (the thread
    deletions, counts summed in `deleted`), `erased["memory"]`, then the node's own steps."""

    user_id: str
    erasure_id: int
    requested_at: datetime
    completed_at: datetime | None
    erased: dict[str, Any]


class AppendResult(_Result):
    """The stored messages of an append, durable, with offsets and seqs (`AppendResponse`)."""

    thread_id: str
    messages: list[Message]


class MessagesPage(_Result):
    """A page of a thread's messages; pass `next_after` as `after` for the next one."""

    thread_id: str
    messages: list[Message]
    next_after: int


class Agent(_Result):
    """An agent's capability bindings and the names of the tools offered to it (`AgentResponse`)."""

    agent_id: str
    capabilities: list[str]
    tools: list[str]


class ToolResult(_Result):
    """The result of a tool call: give `result` back to the model as the tool message."""

    tool: str
    result: dict[str, Any]


class MemoryPage(_Result):
    """A page of memory entries; pass `next_cursor` as `cursor` (None on the last page)."""

    entries: list[MemoryEntry]
    next_cursor: str | None


class EditResult(_Result):
    """An edited entry, whether anything changed, and notes on every side effect (`EditResponse`)."""

    entry: MemoryEntry
    changed: bool
    notes: list[str]


def chat_messages(context: Context) -> list[dict[str, Any]]:
    """The context's messages as the plain dicts of an OpenAI chat-completions `messages=`."""
    return [message.model_dump(mode="json") for message in context.messages]


def tool_definitions(tools: list[ToolSpec]) -> list[dict[str, Any]]:
    """Tool definitions as the plain dicts of an OpenAI chat-completions `tools=`."""
    return [tool.model_dump(mode="json") for tool in tools]
