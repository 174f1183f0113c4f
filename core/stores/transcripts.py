"""The transcript store: the ClickHouse projection of the journal (one row per journal message).

Written by the `clickhouse-projection` processor, read by `journal_message_search`,
`journal_tool_call_view`, `memstream verify` and rebuilt by `memstream rebuild clickhouse`.
One implementation (`sinks/clickhouse/store.py`, clickhouse-connect) serves both the embedded
engine (`chdb:///DIR`, in-process: one process owns a data path) and a ClickHouse server
(`http(s)://...`): same code, same SQL; only the DSN differs.

Rows are identified by (environment, account_id, thread_id, offset): inserting the same message
again (redelivery, replay, rebuild) never makes it appear twice in any read of this interface.
The reads the transcript tools make (`search`, `tool_call`, `tool_call_bytes`) are scoped to one
tenant (environment, account, agent and user, where "no user" means the threads without a user,
never every user's: `TranscriptScope`); query text is always a bound
parameter, never spliced into SQL. `thread_counts` (one environment, every account) and
`row_count` (the whole table) are operator reads for `memstream verify` and `memstream rebuild`,
never reachable from a tenant's request.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Protocol

from core.errors import StoreUnavailable

Role = Literal["system", "user", "assistant", "tool"]
ToolCallPart = Literal["arguments", "result"]


@dataclass(frozen=True)
class TranscriptRow:
    """One journal message as projected (`core.journal.models.Message`, flattened)."""

    environment: str
    account_id: str
    agent_id: str
    user_id: str | None
    thread_id: str
    message_id: str
    offset: int
    seq: int
    role: Role
    content: str
    reasoning: str | None
    tool_call_id: str | None
    tool_name: str | None
    tool_arguments: str | None
    tool_result: str | None
    created_at: datetime  # timezone-aware UTC
    token_count: int
    terms: tuple[str, ...] = ()
    """The search terms of the content (`core.transcripts.terms.message_terms`: () unless the
    role is searched), what search matches and weighs."""
    context_terms: tuple[str, ...] = ()
    """For a message with `terms`, the `terms` of the latest earlier message of its thread that has
    some (() for the first; () for a message without terms): part of its search document, so a
    reply is found by the words of what it answers. Filled by the projection
    (`processors.transcript_context`)."""
    shard: int = 0
    """The message's journal shard (`core.sharding.shards`): `seq` counts within it."""


ThreadKey = tuple[str, str, str, str]
"""(environment, account_id, agent_id, thread_id): a thread, the prefix of the table's sorting key."""


def thread_key(row: TranscriptRow) -> ThreadKey:
    return (row.environment, row.account_id, row.agent_id, row.thread_id)


@dataclass(frozen=True)
class TranscriptScope:
    """Who reads: always one environment, account and agent, and exactly one user: `user_id`'s
    threads, or, when `user_id` is None, only the threads that have no user. No scope reaches
    every user's threads: a caller without a user must never read a user's conversations."""

    environment: str
    account_id: str
    agent_id: str
    user_id: str | None = None


@dataclass(frozen=True)
class Period:
    """A range of message times: `since` inclusive, `until` exclusive (None: unbounded)."""

    since: datetime | None = None
    until: datetime | None = None

    def holds(self, moment: datetime) -> bool:
        return (self.since is None or moment >= self.since) and (self.until is None or moment < self.until)


@dataclass(frozen=True)
class MessageHit:
    """A matching `user` or `assistant` message (never system, tool or reasoning text)."""

    thread_id: str
    message_id: str
    offset: int
    role: Role
    content: str
    created_at: datetime
    score: float  # higher is better; comparable within one search only


@dataclass(frozen=True)
class ToolCallInfo:
    """One tool call: where its messages are and how large its parts are (UTF-8 bytes).

    A tool-call id may repeat within a thread (some servers emit `call_0` every turn): each
    repetition is a call of its own (`core/transcripts/tool_calls.py` pairs the messages), and
    `occurrence` numbers the calls with the same id in the thread, from 1 in offset order."""

    tool_call_id: str
    thread_id: str
    tool_name: str | None
    call_offset: int | None  # offset of the assistant message carrying the call (None if absent)
    result_offset: int | None  # offset of the tool message carrying the result (None if absent)
    arguments_bytes: int
    result_bytes: int
    created_at: datetime  # of the call's first message
    occurrence: int  # 1 = the first call with this id in the thread


@dataclass(frozen=True)
class ThreadCount:
    """Per-thread figures of a projection (or of the journal), for `memstream verify`."""

    environment: str
    account_id: str
    thread_id: str
    messages: int  # distinct offsets
    max_offset: int


class TranscriptUnavailable(StoreUnavailable):
    """The store cannot be reached or written right now (transient: retry later; an outage to the
    processor runtime)."""

    code = "transcript_unavailable"


class TranscriptStore(Protocol):
    async def ensure_schema(self) -> None:
        """Create the database, table(s) and indexes if missing (idempotent)."""

    async def instance_id(self) -> str:
        """The id of this store (the database on this server or embedded directory): the same on
        every call and from every client, another one once the store was created anew (its
        database dropped, its directory wiped). Creates it on first use. Raises
        TranscriptUnavailable on a transient failure."""

    async def delete_thread(
        self, environment: str, account_id: str, thread_id: str, up_to_seq: int, *, table: str | None = None
    ) -> int:
        """Delete the thread's rows with `seq <= up_to_seq` (a thread deletion's tombstone) from
        `table` (None: the live one); durable when it returns. Returns the rows found (copies of
        a row count each). Idempotent."""
        ...

    async def count_thread_rows(
        self, environment: str, account_id: str, thread_id: str, up_to_seq: int
    ) -> int:
        """The live table's rows of the thread with `seq <= up_to_seq` (copies count each): what a
        deletion's tombstone should have left none of. Operator read (`memstream verify`)."""
        ...

    async def insert(self, rows: Sequence[TranscriptRow], *, table: str | None = None) -> None:
        """Write `rows` (any order, duplicates allowed); returns once they are stored.
        `table`: a rebuild table from `create_rebuild_table` (default: the live table).
        Raises TranscriptUnavailable on a transient failure (nothing is half-visible twice:
        a retry of the same rows is harmless)."""

    async def previous_terms(
        self, before: Mapping[ThreadKey, int], *, table: str | None = None
    ) -> dict[ThreadKey, tuple[str, ...]]:
        """For each thread of `before`, the `terms` of its latest message with (non-empty) terms
        whose offset is below the given one (threads without such a message are left out); `table` as
        for `insert`. Operator read for the projection (the context of a batch's first
        messages), never reachable from a tenant's request."""

    async def search(
        self,
        scope: TranscriptScope,
        query: str,
        *,
        thread_id: str | None = None,
        limit: int = 10,
        period: Period | None = None,
    ) -> list[MessageHit]:
        """The best `limit` user/assistant messages of the scope matching `query` (bound
        parameter), optionally within one thread and a `period` of `created_at` (the statistics
        are then those of the messages in it); best first, each message at most once."""

    async def tool_call(
        self, scope: TranscriptScope, tool_call_id: str, *, thread_id: str | None = None
    ) -> list[ToolCallInfo]:
        """Every tool call with this id in the scope, optionally within one thread: one entry
        per call (several per thread when the id repeats there), most recent first."""

    async def tool_call_bytes(
        self,
        scope: TranscriptScope,
        call: ToolCallInfo,
        part: ToolCallPart,
        offset: int,
        length: int,
    ) -> bytes:
        """Bytes [offset, offset+length) of the UTF-8 text of `call`'s arguments or result
        (fewer at the end; b"" past it), read from the very message `call` names
        (`call_offset` for the arguments, `result_offset` for the result: the message its
        `*_bytes` size was measured on), in `scope`. ValueError when `call` has no message for
        `part`. Read in the store, not by loading the whole text."""

    async def thread_counts(self, environment: str, *, table: str | None = None) -> list[ThreadCount]:
        """Per-thread message counts of every thread of the environment, every account
        (operator read, for `memstream verify`: not scoped to a tenant)."""

    async def row_count(self, *, table: str | None = None) -> int:
        """Distinct messages stored in the whole table, every environment and account (after
        deduplication; operator read, for `memstream rebuild`: not scoped to a tenant)."""

    async def create_rebuild_table(self) -> str:
        """A fresh, empty table with the live table's schema; returns its name."""

    async def swap_in(self, table: str) -> None:
        """Atomically make `table` the live table; the previous live table is dropped."""

    async def drop_table(self, table: str) -> None:
        """Drop a rebuild table that will not be swapped in (idempotent)."""

    async def ping(self) -> None:
        """Raise TranscriptUnavailable unless the store answers."""

    async def close(self) -> None: ...
