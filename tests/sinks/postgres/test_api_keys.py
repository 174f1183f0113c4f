from __future__ import annotations

import hashlib

import asyncpg

from sinks.postgres import api_keys


def _hash(text: str) -> bytes:
    return hashlib.sha256(text.encode()).digest()


async def test_insert_find_list_revoke(pool: asyncpg.Pool) -> None:
    record = await api_keys.insert_key(
        pool,
        key_id="key_1",
        environment="test",
        account_id="acme",
        key_hash=_hash("k1"),
        prefix="msk_abc",
        label="ci",
    )
    assert (record.account_id, record.label, record.revoked) == ("acme", "ci", False)
    assert await api_keys.find_by_hash(pool, _hash("k1"), environment="test") == record
    assert await api_keys.find_by_hash(pool, _hash("k1"), environment="prod") is None
    assert await api_keys.find_by_hash(pool, _hash("k2"), environment="test") is None
    assert [r.key_id for r in await api_keys.list_keys(pool, environment="test", account_id="acme")] == [
        "key_1"
    ]
    assert await api_keys.list_keys(pool, environment="test", account_id="globex") == []

    assert not await api_keys.revoke_key(pool, environment="test", account_id="globex", key_id="key_1")
    assert await api_keys.revoke_key(pool, environment="test", account_id="acme", key_id="key_1")
    revoked = await api_keys.find_by_hash(pool, _hash("k1"), environment="test")
    assert revoked is not None and revoked.revoked
    assert await api_keys.revoke_key(
        pool, environment="test", account_id="acme", key_id="key_1"
    )  # idempotent
    again = await api_keys.find_by_hash(pool, _hash("k1"), environment="test")
    assert again is not None and again.revoked_at == revoked.revoked_at
