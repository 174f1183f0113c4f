"""`SqlService`: one read-only query of a data-access key, from its text to its output.

1. A slot: at most `max_concurrent_queries` run at once and `max_queued_queries` wait; more are
   refused (TOO_MANY_SIMULTANEOUS_QUERIES, HTTP 503) so a dashboard cannot starve the node.
2. The engine prints the query back with `formatQuerySingleLine` (the text is a bound parameter,
   never SQL of ours; several statements are refused by the engine's parser), and parses that with
   `parseQueryToJSON`: `core.sql.policy` checks the tree. What runs is the printed query: what was
   checked is what runs.
3. The settings (`core.sql.limits`): the node's limits, the client's allowed settings, a row
   filter on every table of the projection's database for the key's environment and account,
   `readonly = 1` last.
4. The engine streams the output in the format of the FORMAT clause, else `default_format`, else
   TabSeparated.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field

from core.sql.access import DataPrincipal
from core.sql.config import SqlSettings
from core.sql.engine import SqlEngine
from core.sql.errors import (
    AUTHENTICATION_FAILED,
    QUERY_IS_TOO_LARGE,
    SYNTAX_ERROR,
    TOO_MANY_SIMULTANEOUS_QUERIES,
    UNKNOWN_DATABASE,
    UNKNOWN_FORMAT,
    SqlError,
)
from core.sql.formats import DEFAULT_FORMAT, OutputFormat, format_names, output_format
from core.sql.limits import query_settings, table_filters
from core.sql.policy import check_select, check_statement, is_select

_IN_SCOPE = re.compile(r":? In scope SELECT (?:formatQuerySingleLine|parseQueryToJSON)\(.*$", re.DOTALL)
_COLUMNS = "SELECT table, name FROM system.columns WHERE database = {db:String}"


@dataclass
class SqlRequest:
    """A query as a client sent it: the text, the `database`, `default_format`, settings and
    query parameters (`param_NAME` without the prefix) of its URL."""

    query: str
    database: str | None = None
    default_format: str | None = None
    settings: dict[str, str] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)


@dataclass
class SqlResult:
    """A query that started: its format and its output (raises SqlError if it fails on the way)."""

    format: OutputFormat
    chunks: AsyncIterator[bytes]


class SqlService:
    """See the module doc. `engine` is the node's ClickHouse; `environment` the node's."""

    def __init__(self, engine: SqlEngine, limits: SqlSettings, environment: str) -> None:
        self.engine = engine
        self.limits = limits
        self.environment = environment
        self._slots = asyncio.Semaphore(limits.max_concurrent_queries)
        self._waiting = 0

    async def run(self, principal: DataPrincipal, request: SqlRequest) -> SqlResult:
        """Check and start `request`; SqlError when it cannot run. The slot is held until the
        output was read to its end or closed."""
        size = len(request.query.encode())
        if size > self.limits.max_query_bytes:
            raise SqlError(
                QUERY_IS_TOO_LARGE,
                f"the query is {size} bytes; the limit is {self.limits.max_query_bytes} "
                "(MEMSTREAM_SQL__MAX_QUERY_BYTES)",
            )
        await self._acquire()
        try:
            fmt, chunks = await self._start(principal, request)
            first = await anext(chunks, None)
        except BaseException:
            self._slots.release()
            raise
        return SqlResult(fmt, self._held(first, chunks))

    async def _acquire(self) -> None:
        if self._slots.locked() and self._waiting >= self.limits.max_queued_queries:
            raise SqlError(
                TOO_MANY_SIMULTANEOUS_QUERIES,
                f"{self.limits.max_concurrent_queries} queries are running and {self._waiting} waiting: "
                "try again shortly",
            )
        self._waiting += 1
        try:
            await self._slots.acquire()
        finally:
            self._waiting -= 1

    async def _held(self, first: bytes | None, chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        try:
            if first is None:
                return
            yield first
            async for chunk in chunks:
                yield chunk
        finally:
            try:
                await chunks.aclose()  # type: ignore[attr-defined]
            finally:
                self._slots.release()

    async def _start(
        self, principal: DataPrincipal, request: SqlRequest
    ) -> tuple[OutputFormat, AsyncIterator[bytes]]:
        database = self.engine.database
        if request.database not in (None, "", "default", database):
            raise SqlError(
                UNKNOWN_DATABASE,
                f"Database {request.database} does not exist: the SQL endpoint serves {database}",
            )
        if principal.environment != self.environment:
            raise SqlError(
                AUTHENTICATION_FAILED,
                f"the key is of environment {principal.environment!r}, the node of {self.environment!r}",
            )
        if not request.query.strip():
            raise SqlError(
                SYNTAX_ERROR, "Empty query: send the SQL in the request body or the query parameter"
            )
        formatted = await self._parse(request.query)
        if is_select(formatted):
            tree = json.loads(await self._engine_text("SELECT parseQueryToJSON({q:String})", formatted))
            checked = check_select(tree, database)
        else:
            checked = check_statement(formatted, database)
        name = checked.format or request.default_format or DEFAULT_FORMAT
        fmt = output_format(name)
        if fmt is None:
            raise SqlError(
                UNKNOWN_FORMAT,
                f"Unknown or unsupported output format {name}; formats: {', '.join(format_names())}",
            )
        filters = table_filters(database, await self._columns(), principal.environment, principal.account_id)
        settings = query_settings(self.limits, fmt, request.settings, filters)
        return fmt, self.engine.stream(formatted, fmt, settings, request.params)

    async def _parse(self, query: str) -> str:
        return (await self._engine_text("SELECT formatQuerySingleLine({q:String})", query)).rstrip("\n")

    async def _engine_text(self, sql: str, query: str) -> str:
        try:
            return await self.engine.text(sql, {"q": query})
        except SqlError as exc:
            exc.message = _IN_SCOPE.sub("", exc.message).rstrip(" .")
            raise

    async def _columns(self) -> Mapping[str, set[str]]:
        tables: dict[str, set[str]] = {}
        for line in (await self.engine.text(_COLUMNS, {"db": self.engine.database})).splitlines():
            table, _, column = line.partition("\t")
            tables.setdefault(table, set()).add(column)
        return tables
