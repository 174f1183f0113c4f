"""Helpers building `MemoryEntry` values for the pure tests of recall, pinning and tools."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from core.memory.models import MemoryEntry

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


def make_entry(entry_id: str, **fields: Any) -> MemoryEntry:
    values: dict[str, Any] = {
        "entry_id": entry_id,
        "environment": "test",
        "account_id": "acme",
        "agent_id": "bot",
        "user_id": None,
        "author_user_id": None,
        "key": f"k.{entry_id}",
        "content": f"content {entry_id}",
        "category": "user_profile",
        "visibility": "shared",
        "importance": 0.8,
        "content_hash": "0" * 64,
        "expires_at": None,
        "created_at": T0,
        "updated_at": T0,
    }
    values.update(fields)
    if values["visibility"] == "private" and values["user_id"] is None:
        values["user_id"] = "u1"
    return MemoryEntry(**values)


def minutes(n: int) -> timedelta:
    return timedelta(minutes=n)
