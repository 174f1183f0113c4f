"""The asyncpg connection pool every Postgres adapter shares.

`create_pool(dsn)` opens a pool whose connections decode `json`/`jsonb` columns to Python values
and encode Python values to JSON for them, so adapters pass and receive plain dicts. Callers own
the pool: `await pool.close()` when done. Creating the pool connects (`min_size` connections), so
an unreachable server fails here with the driver's error.

The pool (`Pool`) never fails a statement for a connection the server ended while it sat idle in
the pool (`sinks.postgres.errors.ended_while_idle`: a Postgres restart, a dead postmaster, a
terminated backend; asyncpg would hand such a connection out and refuse the next operation on it,
before sending anything). Its single-statement methods (`execute`, `executemany`, `fetch`,
`fetchval`, `fetchrow`, `fetchmany`) discard that connection and run the statement on another one
(a new connection when the server is back; the driver's connection error when it is not). A
statement that completed is not failed either when the connection breaks right after it (its
release, should it fail, discards the connection). Work on a connection taken with
`acquire()` (a transaction) is not repeated: a connection ended while idle fails its first
statement, and that error counts as Postgres being unavailable (`is_postgres_unavailable`: 503 for
the API, an outage waited out for processors); the pool discards the connection on release.

Release is cheap (`_keep_session`): asyncpg rolls back a transaction left open and drops the
connection's listener callbacks, but the pool does not send asyncpg's default reset (`CLOSE ALL;
UNLISTEN *; RESET ALL; SELECT pg_advisory_unlock_all()`, one round trip per release). So a pool
user that changes session state undoes it before releasing, or terminates the connection when it
cannot: the migrations' session advisory lock (`sinks.postgres.migrations`) and the LISTENs of the
outbox relay and of the cache feed (`sinks.postgres.outbox`, `sinks.postgres.invalidation`). No
other pool user sets session state (`SET`, session locks, `LISTEN`, holdable cursors, temp tables).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from sinks.postgres.errors import ended_while_idle

log = logging.getLogger("memstream.postgres")

T = TypeVar("T")

MAX_QUERIES = 50_000
INACTIVE_LIFETIME_S = 300.0
"""asyncpg's defaults for `create_pool`."""


def _encode_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


async def _init_connection(conn: asyncpg.Connection) -> None:
    for name in ("json", "jsonb"):
        await conn.set_type_codec(name, encoder=_encode_json, decoder=json.loads, schema="pg_catalog")


class Pool(asyncpg.Pool):  # type: ignore[misc]  # asyncpg is untyped
    """asyncpg's pool, whose single statements survive connections ended while idle (module doc)."""

    # asyncpg's own signatures: their `timeout` is the statement timeout asyncpg applies (ASYNC109)

    async def execute(self, query: str, *args: Any, timeout: float | None = None) -> str:  # noqa: ASYNC109
        return await self._statement(lambda con: con.execute(query, *args, timeout=timeout))

    async def executemany(
        self,
        command: str,
        args: Iterable[Any],
        *,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> None:
        rows = list(args)  # may be a generator: a second attempt needs them again
        await self._statement(lambda con: con.executemany(command, rows, timeout=timeout))

    async def fetch(
        self,
        query: str,
        *args: Any,
        timeout: float | None = None,  # noqa: ASYNC109
        record_class: Any = None,
    ) -> list[Any]:
        return await self._statement(
            lambda con: con.fetch(query, *args, timeout=timeout, record_class=record_class)
        )

    async def fetchval(
        self,
        query: str,
        *args: Any,
        column: int = 0,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> Any:
        return await self._statement(lambda con: con.fetchval(query, *args, column=column, timeout=timeout))

    async def fetchrow(
        self,
        query: str,
        *args: Any,
        timeout: float | None = None,  # noqa: ASYNC109
        record_class: Any = None,
    ) -> Any:
        return await self._statement(
            lambda con: con.fetchrow(query, *args, timeout=timeout, record_class=record_class)
        )

    async def fetchmany(
        self,
        query: str,
        args: Iterable[Any],
        *,
        timeout: float | None = None,  # noqa: ASYNC109
        record_class: Any = None,
    ) -> list[Any]:
        rows = list(args)
        return await self._statement(
            lambda con: con.fetchmany(query, rows, timeout=timeout, record_class=record_class)
        )

    async def _statement(self, operation: Callable[[PoolConnectionProxy], Awaitable[T]]) -> T:
        """Run `operation` on a pooled connection; on one ended while idle, discard it and run it
        on another (every pooled connection may have been ended at once: at most `max_size` more)."""
        attempts = self.get_max_size() + 1
        for attempt in range(1, attempts + 1):
            con = await self.acquire()
            try:
                result = await operation(con)
            except Exception as exc:
                if ended_while_idle(exc) and attempt < attempts:
                    log.info("a pooled PostgreSQL connection was ended by the server: using another one")
                    con.terminate()  # back to the pool, connecting anew when next taken
                    continue
                await self._release(con, failed=True)
                raise
            except BaseException:
                await self._release(con, failed=True)
                raise
            await self._release(con, failed=False)
            return result
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def _release(self, con: PoolConnectionProxy, *, failed: bool) -> None:
        """Give `con` back; a release that fails (resetting a connection that broke: asyncpg then
        discards it) does not replace the statement's own outcome."""
        try:
            await self.release(con)
        except Exception as exc:
            log.debug(
                "releasing a PostgreSQL connection after %s failed: %r",
                "an error" if failed else "a statement",
                exc,
            )


async def _keep_session(_conn: asyncpg.Connection) -> None:
    """The pool's reset after asyncpg's own rollback (module doc): nothing more."""


async def create_pool(
    dsn: str, *, min_size: int = 1, max_size: int = 10, command_timeout: float = 30.0
) -> asyncpg.Pool:
    """An open `Pool` on `dsn` with JSON codecs installed on every connection."""
    pool = Pool(
        dsn,
        min_size=min_size,
        max_size=max_size,
        max_queries=MAX_QUERIES,
        max_inactive_connection_lifetime=INACTIVE_LIFETIME_S,
        loop=None,
        connection_class=asyncpg.Connection,
        record_class=asyncpg.Record,
        command_timeout=command_timeout,
        init=_init_connection,
        reset=_keep_session,
    )
    await pool
    return pool
