from __future__ import annotations

import hashlib

import asyncpg

from sinks.postgres.api_keys import PostgresApiKeys


def _hash(text: str) -> bytes:
    return hashlib.sha256(text.encode()).digest()


async def test_insert_find_list_revoke(pool: asyncpg.Pool) -> None:
    keys = PostgresApiKeys(pool)
    record = await keys.insert(
        key_id="key_1",
        environment="test",
        account_id="acme",
        key_hash=_hash("k1"),
        prefix="msk_abc",
        label="ci",
    )
    assert (record.account_id, record.label, record.revoked) == ("acme", "ci", False)
    assert await keys.find_by_hash(_hash("k1"), environment="test") == record
    assert await keys.find_by_hash(_hash("k1"), environment="prod") is None
    assert await keys.find_by_hash(_hash("k2"), environment="test") is None
    assert [r.key_id for r in await keys.list(environment="test", account_id="acme")] == ["key_1"]
    assert await keys.list(environment="test", account_id="globex") == []

    assert not await keys.revoke(environment="test", account_id="globex", key_id="key_1")
    assert await keys.revoke(environment="test", account_id="acme", key_id="key_1")
    revoked = await keys.find_by_hash(_hash("k1"), environment="test")
    assert revoked is not None and revoked.revoked
    assert await keys.revoke(environment="test", account_id="acme", key_id="key_1")  # idempotent
    again = await keys.find_by_hash(_hash("k1"), environment="test")
    assert again is not None and again.revoked_at == revoked.revoked_at
