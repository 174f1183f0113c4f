"""Database schema and API keys, for `memstream up` (first start), `memstream init` and `keys create`."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from core.auth import issue_key
from core.config import Settings
from core.stores.api_keys import ApiKeyStore
from sinks.postgres.api_keys import PostgresApiKeys
from sinks.postgres.migrations import migrate
from sinks.postgres.pool import create_pool

DEFAULT_ACCOUNT = "default"

T = TypeVar("T")


async def create_key(settings: Settings, account_id: str, label: str = "", *, surface: str = "agent") -> str:
    """Create an API key for `account_id` in the configured environment, issued for `surface`
    (`agent` or `mcp`; schema migrated first)."""
    pool = await create_pool(settings.postgres, min_size=1, max_size=2)
    try:
        await migrate(pool)
        return await issue_key(
            PostgresApiKeys(pool), account_id, settings.environment, label, surface=surface
        )
    finally:
        await pool.close()


async def with_keys(settings: Settings, call: Callable[[ApiKeyStore], Awaitable[T]]) -> T:
    """`call` on the API key store of the configured Postgres (schema migrated first)."""
    pool = await create_pool(settings.postgres, min_size=1, max_size=2)
    try:
        await migrate(pool)
        return await call(PostgresApiKeys(pool))
    finally:
        await pool.close()


async def migrate_schema(settings: Settings) -> int:
    """Apply pending Postgres migrations; returns how many were applied."""
    pool = await create_pool(settings.postgres, min_size=1, max_size=2)
    try:
        return len(await migrate(pool))
    finally:
        await pool.close()


def prepare(settings: Settings, key_file: Path) -> bool:
    """Migrate the schema; on first start, create a key for the 'default' account in `key_file`.

    Returns True when a key was created now.
    """
    asyncio.run(migrate_schema(settings))
    if key_file.is_file() and key_file.read_text().strip():
        return False
    key = asyncio.run(create_key(settings, DEFAULT_ACCOUNT, "created by memstream up"))
    key_file.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(key + "\n")
    return True
