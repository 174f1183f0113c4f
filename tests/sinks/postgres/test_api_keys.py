"""The api_keys table on the real embedded Postgres: what only Postgres does (its constraints and
the driver's errors). The store's contract is in `tests/core/stores/test_api_keys.py`."""

from __future__ import annotations

import asyncpg
import pytest

from sinks.postgres.api_keys import PostgresApiKeys
from tests.core.stores.test_api_keys import key_hash


async def test_a_key_id_or_hash_is_stored_once_and_the_surface_is_checked(pool: asyncpg.Pool) -> None:
    keys = PostgresApiKeys(pool)
    await keys.insert(
        key_id="key_1", environment="test", account_id="acme", key_hash=key_hash("k1"), prefix="p", label=""
    )
    with pytest.raises(asyncpg.UniqueViolationError):
        await keys.insert(
            key_id="key_1", environment="prod", account_id="a", key_hash=key_hash("k2"), prefix="p", label=""
        )
    with pytest.raises(asyncpg.UniqueViolationError):
        await keys.insert(
            key_id="key_2", environment="prod", account_id="a", key_hash=key_hash("k1"), prefix="p", label=""
        )
    with pytest.raises(asyncpg.CheckViolationError):
        await keys.insert(
            key_id="key_3",
            environment="test",
            account_id="acme",
            key_hash=key_hash("k3"),
            prefix="p",
            label="",
            surface="browser",
        )
