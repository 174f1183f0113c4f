"""The API key store's contract (`core.stores.api_keys.ApiKeyStore`), on every store: the
in-memory fake and Postgres. Exact hash lookups per environment, an account's keys oldest first,
idempotent revocation by the owning account. What only Postgres does (the table's constraints and
their errors) is in `tests/sinks/postgres/test_api_keys.py`."""

from __future__ import annotations

import asyncio
import hashlib

import pytest

from core.stores.api_keys import ApiKeyStore
from sinks.postgres.api_keys import PostgresApiKeys
from tests.fakes.api_keys import InMemoryApiKeys


@pytest.fixture(params=["memory", pytest.param("postgres", marks=pytest.mark.engine)])
def keys(request: pytest.FixtureRequest) -> ApiKeyStore:
    """The store under test, empty."""
    if request.param == "memory":
        return InMemoryApiKeys()
    return PostgresApiKeys(request.getfixturevalue("pool"))


def key_hash(text: str) -> bytes:
    return hashlib.sha256(text.encode()).digest()


async def test_insert_find_list_revoke(keys: ApiKeyStore) -> None:
    record = await keys.insert(
        key_id="key_1",
        environment="test",
        account_id="acme",
        key_hash=key_hash("k1"),
        prefix="msk_abc",
        label="ci",
    )
    assert (record.key_id, record.environment, record.account_id) == ("key_1", "test", "acme")
    assert (record.prefix, record.label, record.surface, record.revoked) == ("msk_abc", "ci", "agent", False)
    assert await keys.find_by_hash(key_hash("k1"), environment="test") == record
    assert await keys.find_by_hash(key_hash("k1"), environment="prod") is None
    assert await keys.find_by_hash(key_hash("k2"), environment="test") is None
    assert [r.key_id for r in await keys.list(environment="test", account_id="acme")] == ["key_1"]
    assert await keys.list(environment="test", account_id="globex") == []
    assert await keys.list(environment="prod", account_id="acme") == []

    assert not await keys.revoke(environment="test", account_id="globex", key_id="key_1")
    assert not await keys.revoke(environment="prod", account_id="acme", key_id="key_1")
    assert not await keys.revoke(environment="test", account_id="acme", key_id="key_2")
    assert await keys.revoke(environment="test", account_id="acme", key_id="key_1")
    revoked = await keys.find_by_hash(key_hash("k1"), environment="test")
    assert revoked is not None and revoked.revoked and revoked.revoked_at is not None
    assert revoked.revoked_at >= record.created_at
    assert await keys.revoke(environment="test", account_id="acme", key_id="key_1")  # idempotent
    again = await keys.find_by_hash(key_hash("k1"), environment="test")
    assert again is not None and again.revoked_at == revoked.revoked_at
    assert await keys.list(environment="test", account_id="acme") == [again]


async def test_an_accounts_keys_are_listed_oldest_first_with_their_surface(keys: ApiKeyStore) -> None:
    for n, surface in enumerate(["agent", "mcp", "agent"]):
        await keys.insert(
            key_id=f"key_{3 - n}",
            environment="test",
            account_id="acme",
            key_hash=key_hash(f"k{n}"),
            prefix=f"msk_{n}",
            label="",
            surface=surface,
        )
        await asyncio.sleep(0.002)  # distinct creation times
    listed = await keys.list(environment="test", account_id="acme")
    assert [(r.key_id, r.surface) for r in listed] == [
        ("key_3", "agent"),
        ("key_2", "mcp"),
        ("key_1", "agent"),
    ]
    found = await keys.find_by_hash(key_hash("k1"), environment="test")
    assert found is not None and found.surface == "mcp"
