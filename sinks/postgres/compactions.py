"""The `thread_compactions` table: thread memory's durable state (migration 0006).

Redis holds thread memory's derived state (counters, the flush-and-summarize guard) and
the broker carries the compaction requests; either may lose everything (a Redis wipe, the
memory-only embedded broker restarting). One row per (environment, account, agent, thread) keeps
what must survive them:

- The compaction in flight (`PostgresCompactions`, a `core.stores.compactions.CompactionLedger`,
  whose module doc has the contract): `thresholds` records the request
  (`record_requests`) BEFORE producing it, the summarizer settles it (`settle`) once a summary
  covers its `to_offset` or it gave up on it. An open request is therefore either on its way or
  lost, and `processors.compaction_recovery` requests it again (`open_compactions`,
  `rerequested`). A newer request (larger `to_offset`) replaces an older one; an older one never
  replaces a newer one.
- A crossing while a request was in flight (`record_crossings`): the guard kept `thresholds` from
  requesting, so the latest such message offset is kept in `crossed_offset` and the recovery
  re-evaluates the thread once the request in flight is settled (instead of waiting for another
  message).
- The summary version high-water mark (`PostgresSummaryVersions`, a
  `core.summaries.models.SummaryVersionFloor`): the highest version ever written, only ever raised.

Every statement names the full key. Errors are the driver's (asyncpg): callers in processors let
them propagate, so the batch is retried.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import asyncpg

from core.journal.models import ThreadRef
from core.stores.compactions import OpenCompaction
from core.stores.thresholds import ThreadScope

_KEY = "environment = $1 AND account_id = $2 AND agent_id = $3 AND thread_id = $4"


def _key(scope: ThreadScope) -> tuple[str, str, str, str]:
    return (scope.environment, scope.account_id, scope.agent_id, scope.thread_id)


class PostgresCompactions:
    """Compactions in flight and pending crossings (`core.stores.compactions.CompactionLedger`).
    `pool` is the caller's."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def agents_of(self, environment: str, account_id: str, thread_id: str) -> list[str]:
        """The agents with a row for the thread (a thread deletion reaches their summaries)."""
        rows = await self._pool.fetch(
            "SELECT agent_id FROM thread_compactions WHERE environment = $1 AND account_id = $2 "
            "AND thread_id = $3 ORDER BY agent_id",
            environment,
            account_id,
            thread_id,
        )
        return [row["agent_id"] for row in rows]

    async def forget_thread(self, environment: str, account_id: str, thread_id: str) -> int:
        """Delete the thread's rows (a thread deletion; their NOTIFY evicts the nodes' cached
        summaries: migration 0011); the rows deleted."""
        status = await self._pool.execute(
            "DELETE FROM thread_compactions WHERE environment = $1 AND account_id = $2 AND thread_id = $3",
            environment,
            account_id,
            thread_id,
        )
        return int(status.split()[-1])

    async def record_requests(self, requests: Sequence[tuple[ThreadScope, Mapping[str, Any]]]) -> None:
        """Record each `compaction.requested` value (its `to_offset`) as its thread's request in
        flight, unless a request with a larger `to_offset` is already in flight. A crossing at or
        before the request's `to_offset` is covered by it and forgotten."""
        if not requests:
            return
        await self._pool.executemany(
            """INSERT INTO thread_compactions AS c
                   (environment, account_id, agent_id, thread_id, request, to_offset, requested_at)
               VALUES ($1, $2, $3, $4, $5, $6, now())
               ON CONFLICT (environment, account_id, agent_id, thread_id) DO UPDATE
                   SET request = EXCLUDED.request, to_offset = EXCLUDED.to_offset,
                       requested_at = now(), rerequests = 0,
                       crossed_offset = CASE WHEN c.crossed_offset <= EXCLUDED.to_offset
                                             THEN NULL ELSE c.crossed_offset END
                   WHERE c.to_offset IS NULL OR c.to_offset <= EXCLUDED.to_offset""",
            [(*_key(scope), dict(payload), int(payload["to_offset"])) for scope, payload in requests],
        )

    async def record_crossings(self, crossings: Mapping[ThreadScope, int]) -> None:
        """Remember, per thread, the latest message offset that crossed a threshold while a
        request was in flight (ignored when that request already reaches it)."""
        if not crossings:
            return
        await self._pool.executemany(
            """INSERT INTO thread_compactions AS c
                   (environment, account_id, agent_id, thread_id, crossed_offset)
               VALUES ($1, $2, $3, $4, $5)
               ON CONFLICT (environment, account_id, agent_id, thread_id) DO UPDATE
                   SET crossed_offset = GREATEST(c.crossed_offset, EXCLUDED.crossed_offset)
                   WHERE c.to_offset IS NULL OR c.to_offset < EXCLUDED.crossed_offset""",
            [(*_key(scope), offset) for scope, offset in crossings.items()],
        )

    async def settle(self, scope: ThreadScope, up_to: int) -> None:
        """The compaction up to offset `up_to` is over (a summary covers it, or it was given up):
        a request in flight with `to_offset <= up_to` is closed and a crossing at or before
        `up_to` forgotten. A newer request in flight is left alone."""
        await self._pool.execute(
            f"""UPDATE thread_compactions
                   SET request = NULL, to_offset = NULL, requested_at = NULL, rerequests = 0,
                       crossed_offset = CASE WHEN crossed_offset <= $5 THEN NULL ELSE crossed_offset END
                 WHERE {_KEY} AND (to_offset IS NULL OR to_offset <= $5)""",
            *_key(scope),
            up_to,
        )

    async def forget_crossing(self, scope: ThreadScope, up_to: int) -> None:
        """The crossing at `up_to` (or before) was re-evaluated: forget it."""
        await self._pool.execute(
            f"UPDATE thread_compactions SET crossed_offset = NULL WHERE {_KEY} AND crossed_offset <= $5",
            *_key(scope),
            up_to,
        )

    async def open_compactions(
        self, *, requested_before: datetime | None, limit: int = 1000
    ) -> list[OpenCompaction]:
        """Requests in flight that were (re-)requested before `requested_before` (every one when
        None), and crossings to re-evaluate (no request in flight), oldest first."""
        rows = await self._pool.fetch(
            """SELECT environment, account_id, agent_id, thread_id, request, to_offset, requested_at,
                      rerequests, crossed_offset
                 FROM thread_compactions
                WHERE (request IS NOT NULL AND ($1::timestamptz IS NULL OR requested_at < $1))
                   OR (request IS NULL AND crossed_offset IS NOT NULL)
                ORDER BY requested_at NULLS FIRST
                LIMIT $2""",
            requested_before,
            limit,
        )
        return [
            OpenCompaction(
                scope=ThreadScope(row["environment"], row["account_id"], row["agent_id"], row["thread_id"]),
                request=row["request"],
                to_offset=row["to_offset"],
                requested_at=row["requested_at"],
                rerequests=row["rerequests"],
                crossed_offset=row["crossed_offset"],
            )
            for row in rows
        ]

    async def rerequested(self, requests: Sequence[tuple[ThreadScope, int]]) -> None:
        """The requests in flight up to these offsets were produced again (confirmed by the broker)."""
        if not requests:
            return
        await self._pool.executemany(
            f"""UPDATE thread_compactions SET requested_at = now(), rerequests = rerequests + 1
                 WHERE {_KEY} AND to_offset = $5""",
            [(*_key(scope), to_offset) for scope, to_offset in requests],
        )

    async def get(self, scope: ThreadScope) -> OpenCompaction | None:
        """The thread's row (open or not), or None: for tests and operators."""
        row = await self._pool.fetchrow(
            f"""SELECT request, to_offset, requested_at, rerequests, crossed_offset
                  FROM thread_compactions WHERE {_KEY}""",
            *_key(scope),
        )
        if row is None:
            return None
        return OpenCompaction(
            scope=scope,
            request=row["request"],
            to_offset=row["to_offset"],
            requested_at=row["requested_at"],
            rerequests=row["rerequests"],
            crossed_offset=row["crossed_offset"],
        )


class PostgresSummaryVersions:
    """`core.summaries.models.SummaryVersionFloor` on `thread_compactions.summary_version`."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def highest(self, thread: ThreadRef, agent_id: str) -> int:
        version = await self._pool.fetchval(
            f"SELECT summary_version FROM thread_compactions WHERE {_KEY}",
            thread.environment,
            thread.account_id,
            agent_id,
            thread.thread_id,
        )
        return int(version) if version is not None else 0

    async def record(self, thread: ThreadRef, agent_id: str, version: int) -> None:
        await self._pool.execute(
            """INSERT INTO thread_compactions AS c
                   (environment, account_id, agent_id, thread_id, summary_version)
               VALUES ($1, $2, $3, $4, $5)
               ON CONFLICT (environment, account_id, agent_id, thread_id) DO UPDATE
                   SET summary_version = EXCLUDED.summary_version
                   WHERE c.summary_version < EXCLUDED.summary_version""",
            thread.environment,
            thread.account_id,
            agent_id,
            thread.thread_id,
            version,
        )


async def compaction_totals(pool: asyncpg.Pool, environment: str) -> tuple[int, int]:
    """(summaries written, compactions in flight) in `environment`: the sum of the threads'
    summary versions (each summary raises its thread's version by one) and the threads with a
    request open. One scan of `thread_compactions` (for `/metrics`, a few times a minute)."""
    row = await pool.fetchrow(
        """SELECT coalesce(sum(summary_version), 0) AS summaries,
                  count(*) FILTER (WHERE request IS NOT NULL) AS open
           FROM thread_compactions WHERE environment = $1""",
        environment,
    )
    assert row is not None
    return int(row["summaries"]), int(row["open"])
