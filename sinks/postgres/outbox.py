"""The agent-memory outbox in Postgres (`core.stores.outbox`).

Tables (migration 0003 and later): `memory_outbox` (one row per committed change, written by
`sinks.postgres.memory.MemoryWriteTx.publish`; a trigger NOTIFYs `memstream_memory_outbox` when a
transaction that wrote rows commits), `memory_outbox_published` (confirmed by the broker),
`memory_outbox_applied` (noted by the qdrant-projection).

- `PostgresEntriesOutbox(pool)`: `claim(limit)` runs in one transaction that first takes a
  transaction-level advisory lock (`RELAY_LOCK_KEY`: at most one relay per database publishes at
  a time; the others find it taken and get None), then reads up to `limit` rows in seq order;
  `published()` moves them to `memory_outbox_published` and deletes the rows found both there and
  in `memory_outbox_applied`, committed when the block ends. `republish_unapplied` takes the same
  lock (waiting for it). `listen` holds one pool connection with `LISTEN`.
- `PostgresAppliedOutbox`: on the node's `pool`, or on its own pool to `dsn` (a worker).
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import AsyncIterator, Callable, Sequence

import asyncpg

from core.stores.outbox import OutboxRow
from sinks.postgres.pool import create_pool

NOTIFY_CHANNEL = "memstream_memory_outbox"
RELAY_LOCK_KEY = int.from_bytes(
    hashlib.sha256(b"memstream.memory_outbox.relay").digest()[:8], "big", signed=True
)

_MOVE_PUBLISHED = """
WITH moved AS (
    DELETE FROM memory_outbox WHERE seq = ANY($1::bigint[]) RETURNING seq, record_key, value, created_at
)
INSERT INTO memory_outbox_published (seq, record_key, value, created_at)
SELECT seq, record_key, value, created_at FROM moved
ON CONFLICT (seq) DO NOTHING
"""

_TRIM_APPLIED = """
WITH matched AS (
    DELETE FROM memory_outbox_applied a USING memory_outbox_published p WHERE a.seq = p.seq RETURNING a.seq
)
DELETE FROM memory_outbox_published WHERE seq IN (SELECT seq FROM matched)
"""

_REPUBLISH = """
WITH back AS (
    DELETE FROM memory_outbox_published RETURNING seq, record_key, value, created_at
), inserted AS (
    INSERT INTO memory_outbox (seq, record_key, value, created_at)
    SELECT seq, record_key, value, created_at FROM back
    ON CONFLICT (seq) DO NOTHING RETURNING 1
)
SELECT count(*) FROM inserted
"""


class _Batch:
    """The rows of one claim, on the claim's connection (inside its transaction)."""

    def __init__(self, conn: asyncpg.pool.PoolConnectionProxy, rows: Sequence[OutboxRow]) -> None:
        self.rows = rows
        self._conn = conn

    async def published(self) -> None:
        if self.rows:
            await self._conn.execute(_MOVE_PUBLISHED, [row.seq for row in self.rows])
        await self._conn.execute(_TRIM_APPLIED)


class _Listener:
    """A pool connection that LISTENs on `NOTIFY_CHANNEL`."""

    def __init__(
        self, pool: asyncpg.Pool, conn: asyncpg.pool.PoolConnectionProxy, on_notify: Callable[[], None]
    ):
        self._pool = pool
        self._conn = conn
        self._on_notify = on_notify

    def callback(self, *_args: object) -> None:
        self._on_notify()

    def usable(self) -> bool:
        """False when the connection closed, or the pool took it back because its server went away
        (asking a released proxy raises InterfaceError)."""
        try:
            return not self._conn.is_closed()
        except asyncpg.InterfaceError:
            return False

    async def close(self) -> None:
        """UNLISTEN and give the connection back (terminated when UNLISTEN fails: the pool does not
        UNLISTEN on release, `sinks.postgres.pool`)."""
        try:
            if not self._conn.is_closed():
                await self._conn.remove_listener(NOTIFY_CHANNEL, self.callback)
        except Exception:
            with contextlib.suppress(Exception):
                self._conn.terminate()
        with contextlib.suppress(Exception):
            await self._pool.release(self._conn)


class PostgresEntriesOutbox:
    """See the module doc. Uses the caller's pool (does not close it)."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    @contextlib.asynccontextmanager
    async def claim(self, limit: int) -> AsyncIterator[_Batch | None]:
        async with self.pool.acquire() as conn, conn.transaction():
            if not await conn.fetchval("SELECT pg_try_advisory_xact_lock($1)", RELAY_LOCK_KEY):
                yield None
                return
            rows = await conn.fetch(
                "SELECT seq, record_key, value FROM memory_outbox ORDER BY seq LIMIT $1", limit
            )
            yield _Batch(conn, [OutboxRow(row["seq"], row["record_key"], row["value"]) for row in rows])

    async def republish_unapplied(self) -> int:
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1)", RELAY_LOCK_KEY)
            await conn.execute(_TRIM_APPLIED)
            moved = await conn.fetchval(_REPUBLISH)
        return int(moved)

    async def pending(self) -> int:
        return int(await self.pool.fetchval("SELECT count(*) FROM memory_outbox"))

    async def listen(self, on_notify: Callable[[], None]) -> _Listener:
        conn = await self.pool.acquire()
        listener = _Listener(self.pool, conn, on_notify)
        try:
            await conn.add_listener(NOTIFY_CHANNEL, listener.callback)
        except BaseException:
            await self.pool.release(conn)
            raise
        return listener


class PostgresAppliedOutbox:
    """Where the qdrant-projection notes the outbox seqs it applied (module doc): on the node's
    `pool`, or on its own pool to `dsn` (a worker), opened by `start` and closed by `stop`."""

    def __init__(self, pool: asyncpg.Pool | None = None, *, dsn: str | None = None) -> None:
        if (pool is None) == (dsn is None):
            raise ValueError("give either a pool or a dsn")
        self.pool = pool
        self.dsn = dsn
        self._own = False

    async def start(self) -> None:
        if self.pool is None and self.dsn is not None:
            self.pool = await create_pool(self.dsn, min_size=1, max_size=2)
            self._own = True

    async def stop(self) -> None:
        if self._own and self.pool is not None:
            await self.pool.close()
            self.pool = None
            self._own = False

    async def record(self, seqs: Sequence[int]) -> None:
        """Note that the records of outbox `seqs` are durably applied; the relay then forgets them.
        Idempotent."""
        if not seqs:
            return
        if self.pool is None:
            await self.start()  # its own pool could not be opened at start
        assert self.pool is not None
        await self.pool.execute(
            "INSERT INTO memory_outbox_applied (seq) SELECT unnest($1::bigint[]) ON CONFLICT DO NOTHING",
            list(seqs),
        )
