"""Request and response bodies of the HTTP API (with the examples shown at /docs)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, JsonValue, WithJsonSchema

from core.journal.models import Id, Message, NewMessage
from core.memory.models import Category, MemoryEntry
from core.memory.tools import ToolSpec
from core.stores.deletions import DeletionRecord
from core.stores.erasures import ErasureRecord
from core.threads import MAX_METADATA_BYTES, MAX_WINDOW_MESSAGES, Thread

JsonObject = Annotated[
    Any,
    WithJsonSchema(
        {
            "type": "object",
            "description": f"A JSON object of at most {MAX_METADATA_BYTES} bytes. memstream reads "
            f"`config.max_working_memory_messages` (integer 1..{MAX_WINDOW_MESSAGES}): it lowers the "
            f"{MAX_WINDOW_MESSAGES}-message context window.",
        }
    ),
]

_THREAD_EXAMPLE: dict[str, JsonValue] = {
    "agent_id": "support-bot",
    "user_id": "user-42",
    "metadata": {"channel": "web", "config": {"max_working_memory_messages": 10}},
}


class PutThreadRequest(BaseModel):
    """Create a thread or replace its metadata. agent_id and user_id of an existing thread cannot change."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [_THREAD_EXAMPLE]})

    agent_id: Id
    user_id: Id | None = Field(default=None, description="omit for threads without a user")
    metadata: JsonObject = Field(default_factory=dict, description="replaces the stored metadata")


class PatchThreadRequest(BaseModel):
    """Merge into the metadata (JSON Merge Patch: objects merge, `null` removes a key)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{"metadata": {"config": {"max_working_memory_messages": 5}, "tag": None}}]
        },
    )

    metadata: JsonObject


class ThreadResponse(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "thread_id": "conv-2026-001",
                    "environment": "prod",
                    "account_id": "acme",
                    **_THREAD_EXAMPLE,
                    "window_size": 10,
                    "created_at": "2026-11-29T10:00:00Z",
                    "updated_at": "2026-11-29T10:05:00Z",
                }
            ]
        }
    )

    thread_id: str
    environment: str
    account_id: str
    agent_id: str
    user_id: str | None
    metadata: dict[str, Any]
    window_size: int = Field(description="messages in the context window: min(20, the configured limit)")
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, thread: Thread) -> ThreadResponse:
        return cls(
            thread_id=thread.thread_id,
            environment=thread.environment,
            account_id=thread.account_id,
            agent_id=thread.agent_id,
            user_id=thread.user_id,
            metadata=thread.metadata,
            window_size=thread.window_size,
            created_at=thread.created_at,
            updated_at=thread.updated_at,
        )


class AppendRequest(BaseModel):
    """Messages to append. `agent_id` (and `user_id`) create the thread when it does not exist yet;
    for an existing thread they must match it or be omitted."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "agent_id": "support-bot",
                    "user_id": "user-42",
                    "messages": [
                        {"message_id": "m-0001", "role": "user", "content": "Where is my order?"},
                        {
                            "message_id": "m-0002",
                            "role": "assistant",
                            "tool_call": {
                                "id": "call-1",
                                "name": "lookup_order",
                                "arguments": '{"order_id": "A-17"}',
                            },
                        },
                        {
                            "message_id": "m-0003",
                            "role": "tool",
                            "tool_call": {"id": "call-1", "result": '{"status": "shipped"}'},
                        },
                    ],
                }
            ]
        },
    )

    agent_id: Id | None = None
    user_id: Id | None = None
    messages: list[NewMessage] = Field(
        min_length=1, max_length=1000, description="1..1000 messages; give each a message_id for safe retries"
    )


class AppendResponse(BaseModel):
    thread_id: str
    messages: list[Message] = Field(description="the stored messages, durable, with offsets and seqs")


class ThreadsPage(BaseModel):
    threads: list[ThreadResponse]
    next_cursor: str | None = Field(description="pass as `cursor` for the next page; null on the last page")


class MessagesPage(BaseModel):
    thread_id: str
    messages: list[Message]
    next_after: int = Field(description="pass as `after` to read the following page")


class Liveness(BaseModel):
    status: str = "ok"


class CheckResult(BaseModel):
    ok: bool
    error: str | None = None


class ProcessorHealth(BaseModel):
    state: str = Field(
        description="`starting`, `running`, `paused` (by an operator), `crashed` (restarted alone "
        "after a backoff), `failed` (cannot run here; not restarted) or `stopped`"
    )
    degraded: bool = Field(description="crashed, failed, restarting, or waiting out an outage of a store")
    error: str | None = Field(default=None, description="its last crash, kept after a successful restart")
    restarts: int = Field(description="restarts after crashes since the node started")
    restart_in_s: float | None = Field(default=None, description="crashed: seconds until the next restart")
    outage: str | None = Field(
        default=None, description="its batch waits for an unavailable store or broker: the last error"
    )
    outage_s: float | None = Field(default=None, description="how long it has been waiting")


class Readiness(BaseModel):
    status: str = Field(
        description="`ready`; `degraded` (200: the API and the journal work, but a processor does not: "
        "see `checks.processors` and `processors`); or `unavailable` (503: a store the API needs "
        "does not answer)"
    )
    checks: dict[str, CheckResult]
    processors: dict[str, ProcessorHealth] | None = Field(
        default=None, description="the node's processors by name (absent without processors)"
    )


# ---- agents and agent memory ----------------------------------------------------------------------


class PutAgentRequest(BaseModel):
    """Replace the agent's capability bindings."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"capabilities": ["memory"]}]})

    capabilities: list[str] = Field(
        max_length=16,
        description="the capabilities bound to the agent; `memory` gives it the three memory tools "
        "(memory_store, memory_recall, memory_forget). An empty list unbinds everything.",
    )


class AgentResponse(BaseModel):
    agent_id: str
    capabilities: list[str]
    tools: list[str] = Field(
        description="names of the tools offered to the agent: those of its bindings, and the journal "
        "tools (no binding needed; agent surfaces only)"
    )


class AgentsResponse(BaseModel):
    agents: list[AgentResponse] = Field(
        description="the account's agents: those with threads and those with bindings, by agent_id"
    )


class ToolsResponse(BaseModel):
    agent_id: str
    tools: list[ToolSpec] = Field(description="OpenAI function-calling definitions: pass as `tools=`")


class InvokeToolRequest(BaseModel):
    """One tool call of the model: its arguments, and who the agent acts for."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "arguments": {
                        "key": "user.name",
                        "content": "The user is Ada.",
                        "category": "user_profile",
                    },
                    "user_id": "user-42",
                    "thread_id": "conv-2026-001",
                }
            ]
        },
    )

    arguments: dict[str, JsonValue] | str = Field(
        default_factory=dict,
        description="the call's arguments: a JSON object, or its JSON text as the model sent it",
    )
    user_id: Id | None = Field(
        default=None,
        description="the user the agent acts for (private entries are theirs); with `thread_id`, defaults "
        "to the thread's user and must match it",
    )
    thread_id: Id | None = Field(
        default=None,
        description="the thread the call came from (recorded as provenance; the `current_thread` of "
        "journal_message_search); must be the agent's",
    )


class InvokeToolResponse(BaseModel):
    tool: str
    result: dict[str, Any]


class MemoryPage(BaseModel):
    entries: list[MemoryEntry]
    next_cursor: str | None = Field(description="pass as `cursor` for the next page; null on the last page")


class PatchMemoryRequest(BaseModel):
    """Fields to change; the result goes through the same screening and capacity rules as a store."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"content": "The user is Ada Lovelace.", "importance": 0.9}]},
    )

    key: str | None = None
    content: str | None = None
    category: Category | None = None
    importance: float | None = Field(default=None, ge=0.0, le=1.0)


class EditResponse(BaseModel):
    entry: MemoryEntry
    changed: bool
    notes: list[str]


class ThreadDeletionResponse(BaseModel):
    """What `DELETE /v1/threads/{thread_id}` deleted where (`core.thread_deletion`)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "thread_id": "conv-2026-001",
                    "deletion_id": 17,
                    "requested_at": "2026-12-02T07:00:00Z",
                    "completed_at": "2026-12-02T07:00:01Z",
                    "up_to_seq": 1042,
                    "deleted": {
                        "thread": {"rows": 1},
                        "journal": {"messages": 12, "up_to_seq": 1042},
                        "event": {"published": True, "up_to_seq": 1042},
                    },
                }
            ]
        }
    )

    thread_id: str
    deletion_id: int
    requested_at: datetime
    completed_at: datetime | None
    up_to_seq: int = Field(description="every message of the thread with seq <= this was deleted")
    deleted: dict[str, Any] = Field(description="each store's report, by step (thread, journal, event, ...)")

    @classmethod
    def of(cls, record: DeletionRecord) -> ThreadDeletionResponse:
        return cls(
            thread_id=record.thread_id,
            deletion_id=record.deletion_id,
            requested_at=record.requested_at,
            completed_at=record.completed_at,
            up_to_seq=record.up_to_seq or 0,
            deleted=dict(record.report),
        )


class UserErasureResponse(BaseModel):
    """What `DELETE /v1/users/{user_id}` erased where (`core.user_erasure`)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "user_id": "u-42",
                    "erasure_id": 3,
                    "requested_at": "2026-12-02T07:00:00Z",
                    "completed_at": "2026-12-02T07:00:02Z",
                    "erased": {
                        "threads": {
                            "threads": 1,
                            "deletions": [
                                {"thread_id": "conv-2026-001", "deletion_id": 17, "up_to_seq": 1042}
                            ],
                            "deleted": {
                                "thread": {"rows": 1},
                                "journal": {"messages": 12},
                                "summaries": {"objects": 2},
                                "redis": {"keys": 1},
                                "memory": {"entries": 1, "quarantined": 0},
                                "compactions": {"rows": 1},
                            },
                        },
                        "memory": {
                            "private_entries": 4,
                            "unlinked_entries": 1,
                            "quarantine_deleted": 0,
                            "quarantine_unlinked": 0,
                        },
                    },
                }
            ]
        }
    )

    user_id: str
    erasure_id: int
    requested_at: datetime
    completed_at: datetime | None
    erased: dict[str, Any] = Field(
        description="each step's report: `threads` (the thread deletions, with every store's counts summed "
        "in `deleted`), `memory` (private entries and quarantine rows deleted, entries the user wrote for "
        "others unlinked from them), then the node's own steps"
    )

    @classmethod
    def of(cls, record: ErasureRecord) -> UserErasureResponse:
        return cls(
            user_id=record.user_id,
            erasure_id=record.erasure_id,
            requested_at=record.requested_at,
            completed_at=record.completed_at,
            erased=dict(record.report),
        )
