"""Build the configured transcript store and SQL engine from `settings.clickhouse` and
`settings.clickhouse_database`."""

from __future__ import annotations

from core.config import Settings
from sinks.clickhouse.sql_chdb import ChdbSqlEngine
from sinks.clickhouse.sql_server import ServerSqlEngine
from sinks.clickhouse.store import ClickHouseTranscriptStore


def build_transcript_store(settings: Settings) -> ClickHouseTranscriptStore:
    """`chdb:///DIR` (embedded default, under the data dir) or `http(s)://...` (a server), in the
    database `settings.clickhouse_database`. No I/O: call `ensure_schema()` before writing.
    ValueError for any other DSN scheme."""
    return ClickHouseTranscriptStore(settings.clickhouse, database=settings.clickhouse_database)


def build_sql_engine(settings: Settings) -> ChdbSqlEngine | ServerSqlEngine:
    """The SQL endpoint's engine on the same ClickHouse as the transcript store: chdb (the engine
    the node's store opened) or a server. No I/O."""
    dsn = settings.clickhouse
    if dsn.startswith("chdb://"):
        return ChdbSqlEngine(dsn, settings.clickhouse_database, workers=settings.sql.max_concurrent_queries)
    return ServerSqlEngine(
        dsn, settings.clickhouse_database, read_timeout_s=settings.sql.max_execution_time_s + 30.0
    )
