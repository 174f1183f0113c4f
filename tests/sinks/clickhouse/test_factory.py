"""build_transcript_store and Engines.transcripts(): the configured DSN and database, one instance."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr, ValidationError

from core.config import Settings
from memstream.engines import Engines
from sinks.clickhouse.factory import build_transcript_store
from sinks.clickhouse.store import ClickHouseTranscriptStore
from tests.sinks.clickhouse.rows import row


def test_default_is_chdb_under_the_data_dir(tmp_path: Path) -> None:
    store = build_transcript_store(Settings(data_dir=tmp_path))
    assert store.dsn == f"chdb://{tmp_path.resolve() / 'clickhouse'}"
    assert store.database == "memstream" and store.embedded


def test_server_dsn_and_database_from_settings(tmp_path: Path) -> None:
    settings = Settings(
        data_dir=tmp_path,
        clickhouse_dsn=SecretStr("https://u:p@ch.example:8443"),
        clickhouse_database="mem_prod",
    )
    store = build_transcript_store(settings)
    assert (store.dsn, store.database, store.embedded) == ("https://u:p@ch.example:8443", "mem_prod", False)
    with pytest.raises(ValidationError):
        Settings(clickhouse_database="bad-name")


async def test_engines_share_one_store_and_close_it(
    tmp_path: Path, clickhouse_dsn: str, clickhouse_database: str
) -> None:
    settings = Settings(
        data_dir=tmp_path, clickhouse_dsn=SecretStr(clickhouse_dsn), clickhouse_database=clickhouse_database
    )
    engines = Engines(settings)
    store = engines.transcripts()
    assert store is engines.transcripts()
    assert isinstance(store, ClickHouseTranscriptStore) and store.database == clickhouse_database
    await store.ensure_schema()
    await store.insert([row("t1", 0, "hello")])
    assert await store.row_count() == 1
    await engines.close()
    with pytest.raises(RuntimeError, match="closed"):
        await store.row_count()
