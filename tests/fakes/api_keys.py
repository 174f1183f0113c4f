"""`InMemoryApiKeys`: the `ApiKeyStore` (`core.stores.api_keys`) in memory.

What the contract suite (`tests/core/stores/test_api_keys.py`) asserts of every store holds here:
a key is found by its exact hash within its environment only, an account lists its keys oldest
first (then by key id), revocation is idempotent (the first time is kept) and only by the owning
account. Like the table's constraints, a key id or hash is stored once and the surface is `agent`
or `mcp` (else ValueError). `clock` gives `created_at`/`revoked_at` (default: now, UTC). The
state is public for tests: `records` (by key id) and `hashes` (key id by hash).
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime

from core.stores.api_keys import ApiKeyRecord

SURFACES = ("agent", "mcp")


class InMemoryApiKeys:
    """See the module doc."""

    def __init__(self, clock: Callable[[], datetime] | None = None) -> None:
        self.records: dict[str, ApiKeyRecord] = {}
        self.hashes: dict[bytes, str] = {}
        self.clock = clock or (lambda: datetime.now(UTC))

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
        if key_id in self.records or key_hash in self.hashes:
            raise ValueError(f"key {key_id!r} (or its hash) is already stored")
        if surface not in SURFACES or len(key_hash) != 32:
            raise ValueError(f"not a storable key: surface {surface!r}, {len(key_hash)}-byte hash")
        record = ApiKeyRecord(key_id, environment, account_id, prefix, label, surface, self.clock(), None)
        self.records[key_id] = record
        self.hashes[key_hash] = key_id
        return record

    async def find_by_hash(self, key_hash: bytes, *, environment: str) -> ApiKeyRecord | None:
        record = self.records.get(self.hashes.get(key_hash, ""))
        return record if record is not None and record.environment == environment else None

    async def list(self, *, environment: str, account_id: str) -> builtins.list[ApiKeyRecord]:
        mine = [
            r for r in self.records.values() if (r.environment, r.account_id) == (environment, account_id)
        ]
        return sorted(mine, key=lambda r: (r.created_at, r.key_id))

    async def revoke(self, *, environment: str, account_id: str, key_id: str) -> bool:
        record = self.records.get(key_id)
        if record is None or (record.environment, record.account_id) != (environment, account_id):
            return False
        if record.revoked_at is None:
            self.records[key_id] = replace(record, revoked_at=self.clock())
        return True
