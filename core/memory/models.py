"""Agent memory: the entry model, the rules' constants, whose memory a call reads or writes
(`MemoryScope`), and the `memory.entries` event.

An entry is a curated fact that follows an agent across threads. Postgres is the authority; the
Qdrant index is a projection fed by the `memory.entries` topic (key = `entry_key(...)`, value =
`EntryEvent` JSON for an upsert, a tombstone (null value) for a delete).

Visibility: `shared` entries are visible to every user of the agent; `private` entries only to
their `user_id`. A private entry always has a user_id; a shared one has none (its author is kept
in `author_user_id` for the per-user capacity count).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from core.ids import StoredId

Category = Literal["user_profile", "project_fact", "observation"]
CATEGORIES: tuple[Category, ...] = ("user_profile", "project_fact", "observation")
PROFILE_CATEGORY: Category = "user_profile"
"""Facts about one user: always `private` to that user (never written without one), and the
only category pinned into the user's contexts."""
Visibility = Literal["private", "shared"]

DEFAULT_IMPORTANCE = 0.5
RECALL_DEFAULT_LIMIT = 5
RECALL_MAX_LIMIT = 20
PIN_MIN_IMPORTANCE = 0.7
PIN_MAX = 10
OBSERVATION_TTL_DAYS = 30
DECAY_AFTER_DAYS = 90
DECAY_STEP = 0.1
DECAY_FLOOR = 0.1
MEMORY_CAPABILITY = "memory"


@dataclass(frozen=True)
class CategoryLimits:
    per_agent: int
    per_user: int
    max_chars: int


LIMITS: dict[str, CategoryLimits] = {
    "user_profile": CategoryLimits(per_agent=100, per_user=30, max_chars=2_000),
    "project_fact": CategoryLimits(per_agent=200, per_user=50, max_chars=4_000),
    "observation": CategoryLimits(per_agent=500, per_user=100, max_chars=2_000),
}


class Provenance(BaseModel):
    """Where an entry came from, when known (the pre-compaction flush always knows)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    thread_id: StoredId
    message_ids: tuple[StoredId, ...] = ()


class MemoryEntry(BaseModel):
    """One stored entry (a row of `memory_entries`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    entry_id: str = Field(description="server-assigned UUID")
    environment: str
    account_id: StoredId
    agent_id: StoredId
    user_id: StoredId | None = Field(description="owner of a private entry; None for shared entries")
    author_user_id: StoredId | None = Field(description="the user who wrote it, when there was one")
    key: str
    content: str
    category: Category
    visibility: Visibility
    importance: float = Field(ge=0.0, le=1.0)
    content_hash: str = Field(description="sha256 hex of the content")
    expires_at: datetime | None
    recall_count: int = 0
    last_recalled_at: datetime | None = None
    created_at: datetime
    updated_at: datetime
    source: Provenance | None = None


class MemoryScope(BaseModel):
    """Whose memory to read: the thread's environment, account, agent and (optional) user."""

    model_config = ConfigDict(frozen=True)

    environment: str
    account_id: str
    agent_id: str
    user_id: str | None


class EntryEvent(BaseModel):
    """The value of an upsert on `memory.entries`; `version` increases with every change of the entry."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal[1] = 1
    version: int = Field(ge=1)
    entry: MemoryEntry


def entry_key(environment: str, account_id: str, entry_id: str) -> str:
    """The `memory.entries` record key: enough to find the index collection of a tombstone."""
    return f"{environment}/{account_id}/{entry_id}"


def parse_entry_key(key: str) -> tuple[str, str, str]:
    """(environment, account_id, entry_id) of a `memory.entries` key; ValueError if malformed."""
    parts = key.split("/")
    if len(parts) != 3 or not all(parts):
        raise ValueError(f"malformed memory.entries key {key!r}: expected environment/account/entry_id")
    return parts[0], parts[1], parts[2]
