from __future__ import annotations

import asyncio
from pathlib import Path

import asyncpg
import pytest

from sinks.postgres.migrations import MigrationError, applied_versions, load_migrations, migrate
from sinks.postgres.pool import create_pool


async def test_load_migrations_ordered_and_named() -> None:
    migrations = load_migrations()
    versions = [m.version for m in migrations]
    assert versions == sorted(versions)
    assert versions[:2] == [1, 2]
    assert [m.name for m in migrations[:2]] == ["threads", "api_keys"]


async def test_migrate_applies_all_then_nothing(raw_pool: asyncpg.Pool) -> None:
    assert await applied_versions(raw_pool) == []
    first = await migrate(raw_pool)
    assert [m.version for m in first] == [m.version for m in load_migrations()]
    assert await applied_versions(raw_pool) == [m.version for m in load_migrations()]
    assert await migrate(raw_pool) == []  # idempotent
    tables = {
        r["tablename"]
        for r in await raw_pool.fetch("SELECT tablename FROM pg_tables WHERE schemaname='public'")
    }
    assert {"threads", "api_keys", "schema_migrations"} <= tables


async def test_concurrent_migrations_apply_each_once(pg_dsn: str) -> None:
    """Several 'nodes' (separate pools) migrating the same database at once: each migration once."""
    pools = [await create_pool(pg_dsn, min_size=1, max_size=2) for _ in range(4)]
    try:
        results = await asyncio.gather(*(migrate(p) for p in pools))
        applied = sorted(m.version for result in results for m in result)
        assert applied == [m.version for m in load_migrations()]
        rows = await pools[0].fetch("SELECT version FROM schema_migrations ORDER BY 1")
        assert [r["version"] for r in rows] == applied
    finally:
        for p in pools:
            await p.close()


async def test_edited_migration_is_refused(raw_pool: asyncpg.Pool, tmp_path: Path) -> None:
    (tmp_path / "0001_first.sql").write_text("CREATE TABLE first_t (id int);")
    await migrate(raw_pool, load_migrations(tmp_path))
    (tmp_path / "0001_first.sql").write_text("CREATE TABLE first_t (id bigint);")
    (tmp_path / "0002_second.sql").write_text("CREATE TABLE second_t (id int);")
    with pytest.raises(MigrationError, match="changed after it was applied"):
        await migrate(raw_pool, load_migrations(tmp_path))
    # nothing of the run was applied
    assert await raw_pool.fetchval("SELECT to_regclass('second_t')") is None


async def test_failed_migration_rolls_back_and_is_not_recorded(
    raw_pool: asyncpg.Pool, tmp_path: Path
) -> None:
    (tmp_path / "0001_ok.sql").write_text("CREATE TABLE ok_t (id int);")
    (tmp_path / "0002_bad.sql").write_text("CREATE TABLE bad_t (id int); SELECT no_such_function();")
    with pytest.raises(asyncpg.PostgresError):
        await migrate(raw_pool, load_migrations(tmp_path))
    assert await applied_versions(raw_pool) == [1]
    assert await raw_pool.fetchval("SELECT to_regclass('bad_t')") is None
    # the advisory lock was released: a fixed migration applies
    (tmp_path / "0002_bad.sql").write_text("CREATE TABLE bad_t (id int);")
    assert [m.version for m in await migrate(raw_pool, load_migrations(tmp_path))] == [2]


def test_malformed_file_names_are_refused(tmp_path: Path) -> None:
    (tmp_path / "1_x.sql").write_text("SELECT 1;")
    with pytest.raises(MigrationError, match="NNNN_lower_case_name"):
        load_migrations(tmp_path)


def test_duplicate_versions_are_refused(tmp_path: Path) -> None:
    (tmp_path / "0001_a.sql").write_text("SELECT 1;")
    (tmp_path / "0001_b.sql").write_text("SELECT 1;")
    with pytest.raises(MigrationError, match="share version 0001"):
        load_migrations(tmp_path)
