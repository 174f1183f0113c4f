"""The engine the SQL endpoint runs queries on (`SqlEngine`): the ClickHouse the node's transcript
projection writes, embedded (`sinks.clickhouse.sql_chdb.ChdbSqlEngine`) or a server
(`sinks.clickhouse.sql_server.ServerSqlEngine`).

Contract: every call runs read-only and off the event loop, at most as many at once as the engine
was built for (the caller bounds the queries). Engine errors raise `core.sql.errors.SqlError`
with ClickHouse's code and message; an engine that cannot be reached raises SqlError with code
210 (NETWORK_ERROR). (It lives here, not in `core.stores`, because it speaks in `core.sql`'s
formats and errors: `core.stores` -> `core.sql` -> `core.stores` would be a cycle.)
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Protocol

from core.sql.formats import OutputFormat


class SqlEngine(Protocol):
    database: str
    """The projection's database: the current database of every query."""

    async def text(self, sql: str, params: Mapping[str, str] | None = None) -> str:
        """The whole result of a small query of the node's own (`{name:Type}` placeholders bound to
        `params`) as TabSeparatedRaw text, run with `readonly = 1`."""
        ...

    def stream(
        self, sql: str, fmt: OutputFormat, settings: Mapping[str, str], params: Mapping[str, str]
    ) -> AsyncIterator[bytes]:
        """The result of `sql` in `fmt` as one well-formed output, in chunks as the engine produces
        them, with `settings` applied in order (they end with `readonly = 1`). Raises SqlError
        before the first chunk for a query that cannot run, and from any later chunk when it
        fails on the way. Closing the iterator early stops the query."""
        ...

    async def close(self) -> None:
        """Stop taking queries and release the engine's resources (idempotent)."""
        ...
