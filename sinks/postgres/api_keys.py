"""The `api_keys` table (`PostgresApiKeys`, a `core.stores.api_keys.ApiKeyStore`): one row per
issued key, holding only the SHA-256 of the key.

Every statement names the environment; lookups by hash are exact-match on a unique index.
The key logic (format, hashing, verification rules) lives in `core.auth`.
"""

from __future__ import annotations

import builtins
from typing import Any

import asyncpg

from core.stores.api_keys import ApiKeyRecord

_COLUMNS = "key_id, environment, account_id, prefix, label, surface, created_at, revoked_at"


def _record(row: Any) -> ApiKeyRecord:
    return ApiKeyRecord(
        key_id=row["key_id"],
        environment=row["environment"],
        account_id=row["account_id"],
        prefix=row["prefix"],
        label=row["label"],
        surface=row["surface"],
        created_at=row["created_at"],
        revoked_at=row["revoked_at"],
    )


class PostgresApiKeys:
    """API keys in PostgreSQL (`core.stores.api_keys.ApiKeyStore`). `pool` is the caller's."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def insert(
        self,
        *,
        key_id: str,
        environment: str,
        account_id: str,
        key_hash: bytes,
        prefix: str,
        label: str,
        surface: str = "agent",
    ) -> ApiKeyRecord:
        row = await self._pool.fetchrow(
            f"""INSERT INTO api_keys (key_id, environment, account_id, key_hash, prefix, label, surface)
                VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING {_COLUMNS}""",
            key_id,
            environment,
            account_id,
            key_hash,
            prefix,
            label,
            surface,
        )
        return _record(row)

    async def find_by_hash(self, key_hash: bytes, *, environment: str) -> ApiKeyRecord | None:
        """The key with this hash in `environment` (revoked or not), or None."""
        row = await self._pool.fetchrow(
            f"SELECT {_COLUMNS} FROM api_keys WHERE environment = $1 AND key_hash = $2",
            environment,
            key_hash,
        )
        return None if row is None else _record(row)

    async def list(self, *, environment: str, account_id: str) -> builtins.list[ApiKeyRecord]:
        """Every key of one account, oldest first."""
        rows = await self._pool.fetch(
            f"""SELECT {_COLUMNS} FROM api_keys WHERE environment = $1 AND account_id = $2
                ORDER BY created_at, key_id""",
            environment,
            account_id,
        )
        return [_record(row) for row in rows]

    async def revoke(self, *, environment: str, account_id: str, key_id: str) -> bool:
        """Mark a key revoked (idempotent). False when the account has no such key."""
        result = await self._pool.fetchval(
            """UPDATE api_keys SET revoked_at = coalesce(revoked_at, now())
               WHERE environment = $1 AND account_id = $2 AND key_id = $3 RETURNING key_id""",
            environment,
            account_id,
            key_id,
        )
        return result is not None
