"""Data-access keys on the real Postgres store: scoped to one account or all, refused by the agent
API, and the SQL endpoint refuses every other key; the `memstream keys` commands."""

from __future__ import annotations

import re
from pathlib import Path

import asyncpg
import pytest
from click.testing import CliRunner

from core.auth import issue_key, verify
from core.errors import InvalidInput, NotFound, Unauthorized
from core.sql.access import ALL_ACCOUNTS, issue_data_key, list_keys, revoke_key, verify_data_key
from memstream.cli import main
from sinks.postgres.api_keys import PostgresApiKeys


async def test_an_account_key_reads_its_account_and_an_all_key_every_account(pool: asyncpg.Pool) -> None:
    store = PostgresApiKeys(pool)
    one = await issue_data_key(store, "test", "acme", "analyst")
    every = await issue_data_key(store, "test", None)
    assert re.fullmatch(r"msk_[A-Za-z0-9_-]{43}", one)
    principal = await verify_data_key(store, one, "test")
    assert (principal.environment, principal.account_id, principal.scope) == (
        "test",
        "acme",
        "account 'acme'",
    )
    assert (await verify_data_key(store, every, "test")).account_id is None
    row = await pool.fetchrow("SELECT account_id, surface FROM api_keys WHERE key_id = $1", principal.key_id)
    assert row is not None and (row["account_id"], row["surface"]) == ("acme", "data")
    [record] = await list_keys(store, "test", None)
    assert record.account_id == ALL_ACCOUNTS and record.surface == "data"


async def test_neither_kind_of_key_opens_the_other_door(pool: asyncpg.Pool) -> None:
    store = PostgresApiKeys(pool)
    agent_key = await issue_key(store, "acme", "test")
    mcp_key = await issue_key(store, "acme", "test", surface="mcp")
    data_key = await issue_data_key(store, "test", "acme")
    for key in (agent_key, mcp_key):
        with pytest.raises(Unauthorized, match="the SQL endpoint takes data-access keys only"):
            await verify_data_key(store, key, "test")
    with pytest.raises(Unauthorized, match="is a data-access key: it works only on the SQL endpoint"):
        await verify(store, data_key, "test")


@pytest.mark.parametrize(
    ("key", "message"),
    [
        (None, "missing data-access key"),
        ("not-a-key", "malformed data-access key"),
        ("msk_" + "B" * 43, "unknown data-access key msk_BBBBBBBB..."),
    ],
)
async def test_bad_data_keys_say_what_is_wrong(pool: asyncpg.Pool, key: str | None, message: str) -> None:
    with pytest.raises(Unauthorized, match=re.escape(message)):
        await verify_data_key(PostgresApiKeys(pool), key, "test")


async def test_revoked_and_other_environment_keys_are_refused(pool: asyncpg.Pool) -> None:
    store = PostgresApiKeys(pool)
    key = await issue_data_key(store, "test", "acme")
    every = await issue_data_key(store, "test", None)
    with pytest.raises(Unauthorized, match="no such key in environment 'prod'"):
        await verify_data_key(store, key, "prod")
    principal = await verify_data_key(store, key, "test")
    await revoke_key(store, "test", "acme", principal.key_id)
    with pytest.raises(Unauthorized, match="was revoked"):
        await verify_data_key(store, key, "test")
    every_id = (await verify_data_key(store, every, "test")).key_id
    with pytest.raises(NotFound):  # an every-account key is not one of the account's
        await revoke_key(store, "test", "acme", every_id)
    await revoke_key(store, "test", None, every_id)
    with pytest.raises(Unauthorized, match="was revoked"):
        await verify_data_key(store, every, "test")


async def test_scopes_are_checked(pool: asyncpg.Pool) -> None:
    store = PostgresApiKeys(pool)
    with pytest.raises(InvalidInput, match="account_id"):
        await issue_data_key(store, "test", "*")
    with pytest.raises(InvalidInput):
        await issue_key(store, "*", "test")
    with pytest.raises(asyncpg.CheckViolationError):  # only a data-access key may read every account
        await pool.execute(
            "INSERT INTO api_keys (key_id, environment, account_id, key_hash, prefix, surface) "
            "VALUES ('k', 'test', '*', $1, 'msk_x', 'agent')",
            b"\x01" * 32,
        )


def test_cli_creates_lists_and_revokes_data_access_keys(
    pg_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMSTREAM_POSTGRES_DSN", pg_dsn)
    monkeypatch.setenv("MEMSTREAM_ENVIRONMENT", "test")
    monkeypatch.setenv("MEMSTREAM_DATA_DIR", str(tmp_path / "data"))
    runner = CliRunner()
    for args in (
        ["keys", "create", "--data-access"],
        ["keys", "create", "--data-access", "--account", "acme", "--all-accounts"],
        ["keys", "create", "--all-accounts"],
        ["keys", "create", "--data-access", "--account", "acme", "--surface", "mcp"],
    ):
        refused = runner.invoke(main, args)
        assert refused.exit_code == 2, (args, refused.output)
    created = runner.invoke(main, ["keys", "create", "--data-access", "--account", "acme", "--label", "bi"])
    assert created.exit_code == 0, created.output
    every = runner.invoke(main, ["keys", "create", "--data-access", "--all-accounts"])
    assert every.exit_code == 0, every.output
    runner.invoke(main, ["keys", "create", "--account", "acme"])
    listed = runner.invoke(main, ["keys", "list", "--account", "acme"])
    assert listed.exit_code == 0, listed.output
    assert listed.output.count("data-access") == 1 and listed.output.count("api (agent)") == 1
    assert "'bi'" in listed.output and created.output.strip() not in listed.output  # never the key itself
    [line] = runner.invoke(main, ["keys", "list", "--all-accounts"]).output.splitlines()
    key_id = line.split()[0]
    revoked = runner.invoke(main, ["keys", "revoke", key_id, "--all-accounts"])
    assert revoked.exit_code == 0 and "revoked" in revoked.output
    assert "revoked 20" in runner.invoke(main, ["keys", "list", "--all-accounts"]).output
    missing = runner.invoke(main, ["keys", "revoke", key_id, "--account", "acme"])
    assert missing.exit_code == 1 and "has no key" in missing.output
