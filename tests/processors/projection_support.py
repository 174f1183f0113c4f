"""Building `memory.entries` records and events for the projection tests."""

from __future__ import annotations

import hashlib
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from core.memory.models import EntryEvent, MemoryEntry, entry_key
from streams.runtime.processor import Record

T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
TOPIC = "memory.entries"


def entry(
    n: int, content: str, *, account: str = "acme", environment: str = "test", **changes: Any
) -> MemoryEntry:
    fields: dict[str, Any] = {
        "entry_id": str(uuid.UUID(int=n)),
        "environment": environment,
        "account_id": account,
        "agent_id": "bot",
        "user_id": None,
        "author_user_id": "alice",
        "key": f"fact-{n}",
        "content": content,
        "category": "project_fact",
        "visibility": "shared",
        "importance": 0.5,
        "content_hash": hashlib.sha256(content.encode()).hexdigest(),
        "expires_at": None,
        "created_at": T0,
        "updated_at": T0 + timedelta(seconds=n),
    }
    fields.update(changes)
    return MemoryEntry(**fields)


def key_of(e: MemoryEntry) -> bytes:
    return entry_key(e.environment, e.account_id, e.entry_id).encode()


def value_of(e: MemoryEntry, version: int = 1) -> bytes:
    return EntryEvent(version=version, entry=e).model_dump_json().encode()


def record(key: bytes | None, value: bytes | None, offset: int, partition: int = 0) -> Record:
    return Record(
        topic=TOPIC, partition=partition, offset=offset, key=key, value=value, headers=(), timestamp_ms=None
    )


def upsert(e: MemoryEntry, offset: int, version: int = 1) -> Record:
    return record(key_of(e), value_of(e, version), offset)


def tombstone(e: MemoryEntry, offset: int) -> Record:
    return record(key_of(e), None, offset)
