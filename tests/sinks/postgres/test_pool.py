"""The pool and connections the server ends while they sit idle (a Postgres restart, a dead
postmaster, a terminated backend): a statement is run on another connection instead of failing,
and work on an acquired connection fails as "Postgres unavailable" (503), never as a driver bug.

Real PostgreSQL and asyncpg. Between them, a TCP relay that passes every byte on but delays the
server's closing of a connection by `CLOSE_DELAY_S`: the FATAL message a terminated backend sends
arrives well before the close, which opens (deterministically) the window in which the pool hands
out a connection asyncpg left in an error state; under load that window is a few event-loop turns.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from memstream.embedded.process import free_port
from sinks.postgres.errors import ended_while_idle, is_postgres_unavailable
from sinks.postgres.pool import create_pool

CLOSE_DELAY_S = 2.0


class LateCloseRelay:
    """Relays TCP connections to `upstream`; when the server closes one, the client side is
    closed `close_delay_s` later."""

    def __init__(self, upstream: tuple[str, int], close_delay_s: float) -> None:
        self.upstream = upstream
        self.close_delay_s = close_delay_s
        self.port = free_port()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_connection(*self.upstream)
        to_server = asyncio.create_task(self._pump(client_r, server_w, 0.0))
        to_client = asyncio.create_task(self._pump(server_r, client_w, self.close_delay_s))
        self._tasks |= {to_server, to_client}

    @staticmethod
    async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, close_delay_s: float) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
            await asyncio.sleep(close_delay_s)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()


@pytest.fixture
async def relayed_dsn(pg_dsn: str) -> AsyncIterator[str]:
    """`pg_dsn` through a `LateCloseRelay`."""
    parts = urlsplit(pg_dsn)
    assert parts.hostname is not None and parts.port is not None
    relay = LateCloseRelay((parts.hostname, parts.port), CLOSE_DELAY_S)
    await relay.start()
    try:
        yield urlunsplit(parts._replace(netloc=f"{parts.username}@127.0.0.1:{relay.port}"))
    finally:
        await relay.close()


async def end_backends(pg_dsn: str, pids: list[int]) -> None:
    """Terminate `pids` (an administrator's `pg_terminate_backend`), then let their FATAL messages
    arrive (their closes are still held back by the relay)."""
    admin = await asyncpg.connect(pg_dsn)
    try:
        for pid in pids:
            assert await admin.fetchval("SELECT pg_terminate_backend($1)", pid)
    finally:
        await admin.close()
    await asyncio.sleep(0.5)


async def test_a_statement_on_a_connection_ended_while_idle_runs_on_another(
    pg_dsn: str, relayed_dsn: str
) -> None:
    pool = await create_pool(relayed_dsn, min_size=2, max_size=2)
    try:
        async with pool.acquire() as first, pool.acquire() as second:  # both connections open, idle
            pids = [await conn.fetchval("SELECT pg_backend_pid()") for conn in (first, second)]
        await end_backends(pg_dsn, pids)  # every pooled connection ended at once
        assert await pool.fetchval("SELECT 41 + $1::int", 1) == 42
        await end_backends(pg_dsn, [await pool.fetchval("SELECT pg_backend_pid()")])
        row = await pool.fetchrow("SELECT pg_backend_pid() AS pid")
        assert row is not None and row["pid"] not in pids
        await end_backends(pg_dsn, [row["pid"]])
        await pool.execute("CREATE TEMP TABLE t (x int)")  # a write is not lost either
    finally:
        await pool.close()


async def test_work_on_an_acquired_connection_ended_while_idle_is_postgres_unavailable(
    pg_dsn: str, relayed_dsn: str
) -> None:
    pool = await create_pool(relayed_dsn, min_size=1, max_size=1)
    try:
        await end_backends(pg_dsn, [await pool.fetchval("SELECT pg_backend_pid()")])
        with pytest.raises(asyncpg.InternalClientError) as raised:
            async with pool.acquire() as conn, conn.transaction():
                await conn.execute("SELECT 1")
        assert ended_while_idle(raised.value)
        assert is_postgres_unavailable(raised.value)  # the API answers 503 postgres_unavailable
        assert await pool.fetchval("SELECT 1") == 1  # the pool discarded it
    finally:
        await pool.close()
