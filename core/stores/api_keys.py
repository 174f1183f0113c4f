"""Where API keys are kept (`ApiKeyStore`): one record per issued key, holding only the SHA-256 of
the key. The adapter is `sinks.postgres.api_keys.PostgresApiKeys`; the key logic (format, hashing,
verification rules) lives in `core.auth`.

Contract: every call names the environment; `find_by_hash` is an exact match on the hash within
it. Storage errors are the adapter's and propagate.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol


@dataclass(frozen=True)
class ApiKeyRecord:
    key_id: str
    environment: str
    account_id: str
    prefix: str
    label: str
    surface: str  # `agent`, `mcp` (core.auth.Surface) or `data` (core.sql.access); the store checks it
    created_at: datetime
    revoked_at: datetime | None

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None


class ApiKeyStore(Protocol):
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
        """Store a new key (unrevoked) and return its record."""
        ...

    async def find_by_hash(self, key_hash: bytes, *, environment: str) -> ApiKeyRecord | None:
        """The key with this hash in `environment` (revoked or not), or None."""
        ...

    async def list(self, *, environment: str, account_id: str) -> builtins.list[ApiKeyRecord]:
        """Every key of one account, oldest first."""
        ...

    async def revoke(self, *, environment: str, account_id: str, key_id: str) -> bool:
        """Mark a key revoked (idempotent: the first revocation time is kept). False when the
        account has no such key."""
        ...
