"""`ChdbSqlEngine`: the SQL endpoint's queries on the node's embedded ClickHouse (chdb).

The engine is the one the node's transcript store opened (one chdb path per process): every
query gets a connection handle of its own (they are cheap: ~0.5 ms), so the settings it runs under
(`USE` the projection's database, the limits, the row filters, then `readonly = 1`, which
nothing after can lift) never reach another query or the projection's writes. Handles are used
on the engine's pool of `workers` threads, apart from the transcript store's thread: a long
analytics query never holds up the projection or transcript search.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import chdb

from core.sql.errors import NETWORK_ERROR, SqlError
from core.sql.formats import Assembly, OutputFormat
from sinks.clickhouse.chdb_blocks import assembler
from sinks.clickhouse.schema import check_identifier
from sinks.clickhouse.sql_pump import Emit, pump


def _literal(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def escape_parameter(value: str) -> str:
    """A query parameter's value as the engine reads it (escaped like TabSeparated)."""
    return (
        value.replace("\\", "\\\\")
        .replace("\n", "\\n")
        .replace("\t", "\\t")
        .replace("\r", "\\r")
        .replace("\0", "\\0")
    )


def _params(params: Mapping[str, str] | None) -> dict[str, str]:
    return {name: escape_parameter(value) for name, value in (params or {}).items()}


def _error(exc: Exception) -> SqlError:
    return exc if isinstance(exc, SqlError) else SqlError.from_engine(str(exc))


class ChdbSqlEngine:
    """See the module doc. `dsn` is the node's `chdb:///DIR`."""

    def __init__(self, dsn: str, database: str, *, workers: int) -> None:
        path = dsn.removeprefix("chdb://")
        if not path:
            raise ValueError("clickhouse DSN chdb:// needs a directory, e.g. chdb:///var/lib/memstream/ch")
        self.path = os.path.realpath(path)  # clickhouse-connect's spelling: chdb compares paths literally
        self.database = check_identifier(database)
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="memstream-sql")
        self._closed = False

    def _connect(self) -> Any:
        if self._closed:
            raise SqlError(NETWORK_ERROR, "the SQL endpoint is shutting down", name="NETWORK_ERROR")
        Path(self.path).mkdir(parents=True, exist_ok=True)
        return chdb.connect(self.path)  # type: ignore[no-untyped-call]

    async def text(self, sql: str, params: Mapping[str, str] | None = None) -> str:
        def work() -> str:
            conn = self._connect()
            try:
                conn.query("SET readonly = 1")
                result: str = conn.query(sql, "TabSeparatedRaw", params=_params(params)).bytes().decode()
                return result
            except Exception as exc:
                raise _error(exc) from None
            finally:
                conn.close()

        return await asyncio.get_running_loop().run_in_executor(self._executor, work)

    def stream(
        self, sql: str, fmt: OutputFormat, settings: Mapping[str, str], params: Mapping[str, str]
    ) -> AsyncIterator[bytes]:
        def produce(emit: Emit) -> None:
            conn = self._connect()
            try:
                conn.query(f"USE {self.database}")
                for name, value in settings.items():
                    literal = value if name == "additional_table_filters" else _literal(value)
                    conn.query(f"SET {check_identifier(name)} = {literal}")
                _run(conn, sql, fmt, _params(params), emit)
            except Exception as exc:
                raise _error(exc) from None
            finally:
                conn.close()

        return pump(self._executor, produce)

    async def close(self) -> None:
        self._closed = True
        await asyncio.get_running_loop().run_in_executor(None, lambda: self._executor.shutdown(wait=True))


def _run(conn: Any, sql: str, fmt: OutputFormat, params: dict[str, str], emit: Emit) -> None:
    """Run `sql` on `conn` and emit its output in `fmt` (see `sinks.clickhouse.chdb_blocks`)."""
    if fmt.assembly is Assembly.WHOLE or not sql.startswith(("SELECT", "WITH", "(")):
        # formats with a header and footer, and DESCRIBE/SHOW/EXISTS (the engine does not stream them)
        emit(conn.query(sql, fmt.name, params=params).bytes())
        return
    blocks = assembler(fmt)
    stream = conn.send_query(sql, fmt.name, params=params)
    produced = False
    try:
        for chunk in stream:
            for data in blocks.feed(chunk.bytes()):
                produced = True
                if not emit(data):
                    return
        for data in blocks.finish():
            produced = True
            if not emit(data):
                return
    finally:
        stream.close()
    if not produced and fmt.assembly is not Assembly.CONCAT:
        # no block at all: the empty result still has its header (names, a Parquet schema)
        emit(conn.query(sql, fmt.name, params=params).bytes())
