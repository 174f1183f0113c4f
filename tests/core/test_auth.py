from __future__ import annotations

import asyncio
import hashlib
import re
from pathlib import Path

import asyncpg
import pytest
from click.testing import CliRunner

from core.auth import Principal, issue_key, list_keys, revoke_key, verify
from core.errors import InvalidInput, NotFound, Unauthorized
from memstream.cli import main
from sinks.postgres.api_keys import PostgresApiKeys


async def test_issue_and_verify(pool: asyncpg.Pool) -> None:
    key = await issue_key(PostgresApiKeys(pool), "acme", "test", "ci key")
    assert re.fullmatch(r"msk_[A-Za-z0-9_-]{43}", key)
    principal = await verify(PostgresApiKeys(pool), key, "test")
    assert isinstance(principal, Principal)
    assert (principal.account_id, principal.environment) == ("acme", "test")
    [record] = await list_keys(PostgresApiKeys(pool), "acme", "test")
    assert (record.key_id, record.prefix, record.label) == (principal.key_id, key[:12], "ci key")


async def test_only_a_hash_is_stored(pool: asyncpg.Pool) -> None:
    key = await issue_key(PostgresApiKeys(pool), "acme", "test")
    row = await pool.fetchrow("SELECT * FROM api_keys")
    assert row is not None
    assert bytes(row["key_hash"]) == hashlib.sha256(key.encode()).digest()
    assert all(key not in str(value) for value in dict(row).values())


async def test_keys_are_unique(pool: asyncpg.Pool) -> None:
    keys = {await issue_key(PostgresApiKeys(pool), "acme", "test") for _ in range(5)}
    assert len(keys) == 5
    assert len({(await verify(PostgresApiKeys(pool), k, "test")).key_id for k in keys}) == 5


@pytest.mark.parametrize(
    ("key", "message"),
    [
        (None, "missing API key"),
        ("", "missing API key"),
        ("sk-abcdefabcdefabcdefabcdefabcdef", "malformed API key"),
        ("msk_short", "malformed API key"),
        ("msk_" + "A" * 43, "unknown API key msk_AAAAAAAA..."),
    ],
)
async def test_bad_keys_are_unauthorized(pool: asyncpg.Pool, key: str | None, message: str) -> None:
    with pytest.raises(Unauthorized, match=re.escape(message)):
        await verify(PostgresApiKeys(pool), key, "test")


async def test_revoked_key_is_unauthorized(pool: asyncpg.Pool) -> None:
    key = await issue_key(PostgresApiKeys(pool), "acme", "test")
    principal = await verify(PostgresApiKeys(pool), key, "test")
    with pytest.raises(NotFound):
        await revoke_key(PostgresApiKeys(pool), "globex", "test", principal.key_id)  # not globex's key
    assert await verify(PostgresApiKeys(pool), key, "test") == principal
    await revoke_key(PostgresApiKeys(pool), "acme", "test", principal.key_id)
    with pytest.raises(Unauthorized, match="was revoked"):
        await verify(PostgresApiKeys(pool), key, "test")


async def test_key_of_another_environment_is_unauthorized(pool: asyncpg.Pool) -> None:
    key = await issue_key(PostgresApiKeys(pool), "acme", "prod")
    with pytest.raises(Unauthorized, match="no such key in environment 'test'"):
        await verify(PostgresApiKeys(pool), key, "test")


@pytest.mark.parametrize(
    ("account", "environment", "label", "field"),
    [
        ("bad account", "test", "", "account_id"),
        ("acme", "Bad Env", "", "environment"),
        ("acme", "test", "x" * 201, "label"),
    ],
)
async def test_issue_rejects_bad_input(
    pool: asyncpg.Pool, account: str, environment: str, label: str, field: str
) -> None:
    with pytest.raises(InvalidInput) as info:
        await issue_key(PostgresApiKeys(pool), account, environment, label)
    assert info.value.field == field
    assert await pool.fetchval("SELECT count(*) FROM api_keys") == 0


async def test_keys_are_issued_for_a_surface(pool: asyncpg.Pool) -> None:
    agent_key = await issue_key(PostgresApiKeys(pool), "acme", "test", "platform")
    mcp_key = await issue_key(PostgresApiKeys(pool), "acme", "test", "gateway", surface="mcp")
    agent = await verify(PostgresApiKeys(pool), agent_key, "test")
    mcp = await verify(PostgresApiKeys(pool), mcp_key, "test")
    assert (agent.surface, agent.on_agent_surface) == ("agent", True)
    assert (mcp.surface, mcp.on_agent_surface) == ("mcp", False)
    listed = {
        record.label: record.surface for record in await list_keys(PostgresApiKeys(pool), "acme", "test")
    }
    assert listed == {"platform": "agent", "gateway": "mcp"}


async def test_unknown_surface_is_refused(pool: asyncpg.Pool) -> None:
    with pytest.raises(InvalidInput, match="surface 'browser' is unknown; use one of: agent, mcp") as info:
        await issue_key(PostgresApiKeys(pool), "acme", "test", surface="browser")
    assert info.value.field == "surface"
    assert await pool.fetchval("SELECT count(*) FROM api_keys") == 0
    # the table refuses it too (a row written by other means)
    with pytest.raises(asyncpg.CheckViolationError):
        await pool.execute(
            "INSERT INTO api_keys (key_id, environment, account_id, key_hash, prefix, surface) "
            "VALUES ('k', 'test', 'acme', $1, 'msk_x', 'browser')",
            b"\x00" * 32,
        )


def test_cli_keys_create_with_surface(pg_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMSTREAM_POSTGRES_DSN", pg_dsn)
    monkeypatch.setenv("MEMSTREAM_ENVIRONMENT", "test")
    monkeypatch.setenv("MEMSTREAM_DATA_DIR", str(tmp_path / "data"))
    runner = CliRunner()
    created = runner.invoke(main, ["keys", "create", "--account", "acme", "--surface", "mcp"])
    assert created.exit_code == 0, created.output
    key = created.output.strip()
    refused = runner.invoke(main, ["keys", "create", "--account", "acme", "--surface", "browser"])
    assert refused.exit_code == 2 and "browser" in refused.output

    async def surface() -> str:
        pool = await asyncpg.create_pool(pg_dsn, min_size=1, max_size=1)
        try:
            return (await verify(PostgresApiKeys(pool), key, "test")).surface
        finally:
            await pool.close()

    assert asyncio.run(surface()) == "mcp"
