"""Build the configured transcript store from `settings.clickhouse` and `settings.clickhouse_database`."""

from __future__ import annotations

from core.config import Settings
from sinks.clickhouse.store import ClickHouseTranscriptStore


def build_transcript_store(settings: Settings) -> ClickHouseTranscriptStore:
    """`chdb:///DIR` (embedded default, under the data dir) or `http(s)://...` (a server), in the
    database `settings.clickhouse_database`. No I/O: call `ensure_schema()` before writing.
    ValueError for any other DSN scheme."""
    return ClickHouseTranscriptStore(settings.clickhouse, database=settings.clickhouse_database)
