"""`InMemoryTranscriptStore`: the `TranscriptStore` (`core.stores.transcripts`) in memory.

What the contract suite (`tests/core/stores/test_transcripts.py`) asserts of every store holds
here: rows are keyed by (environment, account, thread, offset), so an insert of the same message
again never shows twice; reads are scoped to one tenant (a scope without a user reads only the
threads without one); search returns user and assistant messages only. Search ranks like the real store: BM25
(`core.transcripts.bm25.scores`) of the rows' `terms` for the query's terms
(`core.transcripts.terms.query_terms`), statistics from the scope's rows only, then the newest
first; the contract asserts membership and order, the real store's tests the scores.

Test hooks: `rows` is the live table's rows as inserted (tests may preset or replace it),
`rebuild_tables` the others'; `inserts` records every insert call (table, rows), `searches` every
search's arguments, `reads` every `tool_call_bytes` (offset, length); `filter_roles=False` makes
search return every role (a misbehaving store); `closed` says whether `close` was called.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from core.stores.transcripts import (
    MessageHit,
    Period,
    ThreadCount,
    ThreadKey,
    ToolCallInfo,
    ToolCallPart,
    TranscriptRow,
    TranscriptScope,
    thread_key,
)
from core.transcripts.bm25 import scores
from core.transcripts.terms import query_terms, terms
from core.transcripts.tool_calls import ToolCallMessage, group_calls

RowKey = tuple[str, str, str, int]

LIVE_TABLE = "messages"


def _key(row: TranscriptRow) -> RowKey:
    return (row.environment, row.account_id, row.thread_id, row.offset)


def _in_scope(row: TranscriptRow, scope: TranscriptScope) -> bool:
    return (row.environment, row.account_id, row.agent_id, row.user_id) == (
        scope.environment,
        scope.account_id,
        scope.agent_id,
        scope.user_id,
    )


def _distinct(rows: Iterable[TranscriptRow]) -> list[TranscriptRow]:
    """One row per message (the last one inserted), in insertion order of the first."""
    return list({_key(r): r for r in rows}.values())


class InMemoryTranscriptStore:
    """See the module doc."""

    def __init__(self, rows: Sequence[TranscriptRow] = (), *, filter_roles: bool = True) -> None:
        self.rows: list[TranscriptRow] = list(rows)
        self.filter_roles = filter_roles
        self.inserts: list[tuple[str | None, list[TranscriptRow]]] = []
        self.searches: list[dict[str, Any]] = []
        self.reads: list[tuple[int, int]] = []
        self.rebuild_tables: dict[str, list[TranscriptRow]] = {}
        self.closed = False
        self._instance = uuid.uuid4().hex

    def _table(self, table: str | None) -> list[TranscriptRow]:
        if table is None or table == LIVE_TABLE:
            return self.rows
        if table not in self.rebuild_tables:
            raise ValueError(f"no table {table!r}")
        return self.rebuild_tables[table]

    async def ensure_schema(self) -> None:
        return None

    async def instance_id(self) -> str:
        return self._instance

    async def insert(self, rows: Sequence[TranscriptRow], *, table: str | None = None) -> None:
        self._table(table).extend(rows)
        self.inserts.append((table, list(rows)))

    async def delete_thread(
        self, environment: str, account_id: str, thread_id: str, up_to_seq: int, *, table: str | None = None
    ) -> int:
        rows = self._table(table)

        def doomed(r: TranscriptRow) -> bool:
            return (r.environment, r.account_id, r.thread_id) == (environment, account_id, thread_id) and (
                r.seq <= up_to_seq
            )

        kept = [r for r in rows if not doomed(r)]
        found = len(rows) - len(kept)
        rows[:] = kept
        return found

    async def count_thread_rows(
        self, environment: str, account_id: str, thread_id: str, up_to_seq: int
    ) -> int:
        scope = (environment, account_id, thread_id)
        return sum(
            1 for r in self.rows if (r.environment, r.account_id, r.thread_id) == scope and r.seq <= up_to_seq
        )

    async def previous_terms(
        self, before: Mapping[ThreadKey, int], *, table: str | None = None
    ) -> dict[ThreadKey, tuple[str, ...]]:
        latest: dict[ThreadKey, TranscriptRow] = {}
        for row in _distinct(self._table(table)):
            key = thread_key(row)
            if key in before and row.terms and row.offset < before[key]:
                if key not in latest or row.offset > latest[key].offset:
                    latest[key] = row
        return {key: row.terms for key, row in latest.items()}

    async def search(
        self,
        scope: TranscriptScope,
        query: str,
        *,
        thread_id: str | None = None,
        limit: int = 10,
        period: Period | None = None,
    ) -> list[MessageHit]:
        self.searches.append({"scope": scope, "query": query, "thread_id": thread_id, "limit": limit})
        if period is not None:
            self.searches[-1]["period"] = period
        wanted = query_terms(query)
        rows = [
            row
            for row in _distinct(self.rows)
            if _in_scope(row, scope)
            and (thread_id is None or row.thread_id == thread_id)
            and (period is None or period.holds(row.created_at))
            and (not self.filter_roles or row.role in ("user", "assistant"))
        ]
        hits = []
        # a misbehaving store matches every role's content (other roles have no stored terms)
        documents = [
            row.terms + row.context_terms if self.filter_roles else tuple(terms(row.content)) for row in rows
        ]
        for row, score in zip(rows, scores(wanted, documents), strict=True):
            if score:
                hits.append(
                    MessageHit(
                        row.thread_id,
                        row.message_id,
                        row.offset,
                        row.role,
                        row.content,
                        row.created_at,
                        score,
                    )
                )
        hits.sort(key=lambda h: (-h.score, -h.created_at.timestamp(), h.thread_id, h.offset))
        return hits[:limit]

    def _calls(self, scope: TranscriptScope, tool_call_id: str) -> list[TranscriptRow]:
        return [r for r in _distinct(self.rows) if _in_scope(r, scope) and r.tool_call_id == tool_call_id]

    async def tool_call(
        self, scope: TranscriptScope, tool_call_id: str, *, thread_id: str | None = None
    ) -> list[ToolCallInfo]:
        return group_calls(
            tool_call_id,
            (
                ToolCallMessage(
                    thread_id=r.thread_id,
                    offset=r.offset,
                    role=r.role,
                    tool_name=r.tool_name,
                    arguments_bytes=len((r.tool_arguments or "").encode()),
                    result_bytes=len((r.tool_result or "").encode()),
                    created_at=r.created_at,
                )
                for r in self._calls(scope, tool_call_id)
                if thread_id is None or r.thread_id == thread_id
            ),
        )

    async def tool_call_bytes(
        self, scope: TranscriptScope, call: ToolCallInfo, part: ToolCallPart, offset: int, length: int
    ) -> bytes:
        self.reads.append((offset, length))
        role, at = ("tool", call.result_offset) if part == "result" else ("assistant", call.call_offset)
        if at is None:
            raise ValueError(f"tool call {call.tool_call_id!r} has no message holding its {part}")
        for row in self._calls(scope, call.tool_call_id):
            if (row.thread_id, row.offset, row.role) == (call.thread_id, at, role):
                text = (row.tool_result if part == "result" else row.tool_arguments) or ""
                return text.encode()[offset : offset + length]
        return b""

    async def thread_counts(self, environment: str, *, table: str | None = None) -> list[ThreadCount]:
        offsets: dict[tuple[str, str], list[int]] = {}
        for row in _distinct(self._table(table)):
            if row.environment == environment:
                offsets.setdefault((row.account_id, row.thread_id), []).append(row.offset)
        return [
            ThreadCount(environment, account, thread, len(found), max(found))
            for (account, thread), found in sorted(offsets.items())
        ]

    async def row_count(self, *, table: str | None = None) -> int:
        return len(_distinct(self._table(table)))

    async def create_rebuild_table(self) -> str:
        name = f"messages_rebuild_{uuid.uuid4().hex[:12]}"
        self.rebuild_tables[name] = []
        return name

    async def swap_in(self, table: str) -> None:
        if table == LIVE_TABLE:
            raise ValueError("swap_in needs a rebuild table, not the live table")
        self.rows = self._table(table)
        del self.rebuild_tables[table]

    async def drop_table(self, table: str) -> None:
        if table == LIVE_TABLE:
            raise ValueError("drop_table refuses to drop the live table")
        self.rebuild_tables.pop(table, None)

    async def ping(self) -> None:
        return None

    async def close(self) -> None:
        self.closed = True
