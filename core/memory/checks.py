"""Agent memory's input checks and the rules every write applies before it changes anything: the
field checks (`check_*`, raising `InvalidInput` naming the field), the scope of a call
(`store_scope`), the visibility a `store` writes with (`effective_visibility`) and the capacity
limits (`check_capacity`). `core.memory.service` has the rules in full.
"""

from __future__ import annotations

import hashlib
import math
import unicodedata
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import get_args

from core.errors import InvalidInput
from core.ids import require_environment, require_id
from core.inputs import check_text
from core.memory.models import CATEGORIES, LIMITS, PROFILE_CATEGORY, Category, MemoryScope, Visibility
from core.memory.screening import Screening, SensitiveWithoutUser
from core.memory.store import MemoryWrites, Scope

MAX_KEY_CHARS = 200
MAX_LIST_LIMIT = 500
MAX_SEARCH_LIMIT = 100
MAX_QUERY_CHARS = 2_000
MAX_KEY_PREFIX_CHARS = MAX_KEY_CHARS


def content_hash(content: str) -> str:
    """sha256 hex of the UTF-8 content (byte identity is what `store` compares)."""
    return hashlib.sha256(content.encode("utf-8")).hexdigest()


class CapacityExceeded(InvalidInput):
    """A new entry would exceed a capacity limit; nothing was written.

    `limit_name` is `per_agent` or `per_user`; `limit` the limit, `count` the live entries counted.
    """

    code = "capacity_exceeded"

    def __init__(self, message: str, *, category: str, limit_name: str, limit: int, count: int) -> None:
        super().__init__(message, field="category")
        self.category = category
        self.limit_name = limit_name
        self.limit = limit
        self.count = count


class ContentTooLong(InvalidInput):
    """Content longer than its category's `max_chars`; nothing was written."""

    code = "content_too_long"

    def __init__(self, message: str, *, category: str, limit: int, length: int) -> None:
        super().__init__(message, field="content")
        self.category = category
        self.limit = limit
        self.length = length


class ProfileWithoutUser(InvalidInput):
    """A `user_profile` entry with no user to own it (a call or thread without a user); nothing
    was written."""

    code = "user_profile_without_user"


def profile_without_user(action: str) -> ProfileWithoutUser:
    return ProfileWithoutUser(
        f"{action}: user_profile entries are facts about one user and this call has no user to own "
        "them; send the call for the user (user_id, or a thread that has one), or store the fact as "
        "project_fact if it is about the agent or the project",
        field="category",
    )


def _profile_private_note(user_id: str) -> str:
    return f"stored as private to user {user_id!r} instead of shared: user_profile entries describe one user"


def _check_id(value: str | None, field: str) -> None:
    if value is not None:
        require_id(value, field)


def store_scope(scope: MemoryScope) -> Scope:
    require_environment(scope.environment)
    _check_id(scope.account_id, "account_id")
    _check_id(scope.agent_id, "agent_id")
    _check_id(scope.user_id, "user_id")
    return Scope(scope.environment, scope.account_id, scope.agent_id, scope.user_id)


def check_key(key: object) -> str:
    if not isinstance(key, str):
        raise InvalidInput("key must be a string", field="key")
    if not key or not key.strip():
        raise InvalidInput("key must not be empty", field="key")
    if len(key) > MAX_KEY_CHARS:
        raise InvalidInput(f"key is {len(key)} characters; the limit is {MAX_KEY_CHARS}", field="key")
    if key != key.strip():
        raise InvalidInput("key must not start or end with whitespace", field="key")
    if any(unicodedata.category(c) in ("Cc", "Cs", "Zl", "Zp") for c in key):
        raise InvalidInput("key must not contain control characters or line breaks", field="key")
    return key


def check_key_prefix(key_prefix: object) -> str | None:
    """A key prefix filter (None: no filter): 1..MAX_KEY_PREFIX_CHARS characters of storable text."""
    if key_prefix is None:
        return None
    if not isinstance(key_prefix, str):
        raise InvalidInput("key_prefix must be a string", field="key_prefix")
    if not 1 <= len(key_prefix) <= MAX_KEY_PREFIX_CHARS:
        raise InvalidInput(
            f"key_prefix is {len(key_prefix)} characters; it must be 1..{MAX_KEY_PREFIX_CHARS}",
            field="key_prefix",
        )
    return check_text(key_prefix, "key_prefix")


def check_category(category: object) -> Category:
    if category not in CATEGORIES:
        raise InvalidInput(
            f"category must be one of {', '.join(CATEGORIES)}, got {category!r}", field="category"
        )
    return category


def check_content(content: object, category: Category) -> str:
    if not isinstance(content, str):
        raise InvalidInput("content must be a string", field="content")
    if not content.strip():
        raise InvalidInput("content must not be empty", field="content")
    check_text(content, "content")
    limit = LIMITS[category].max_chars
    if len(content) > limit:
        raise ContentTooLong(
            f"content is {len(content)} characters; the limit for {category} entries is {limit} characters",
            category=category,
            limit=limit,
            length=len(content),
        )
    return content


def check_importance(importance: object) -> float:
    if isinstance(importance, bool) or not isinstance(importance, int | float):
        raise InvalidInput(
            f"importance must be a number from 0.0 to 1.0, got {importance!r}", field="importance"
        )
    value = float(importance)
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise InvalidInput(f"importance must be from 0.0 to 1.0, got {importance!r}", field="importance")
    return value


def check_visibility(visibility: object, field: str = "scope") -> Visibility:
    if visibility not in get_args(Visibility):
        raise InvalidInput(f"{field} must be 'private' or 'shared', got {visibility!r}", field=field)
    return visibility  # type: ignore[return-value]


def check_expires_at(expires_at: datetime | None, now: datetime) -> None:
    if expires_at is None:
        return
    if expires_at.tzinfo is None:
        raise InvalidInput("expires_at must carry a timezone", field="expires_at")
    if expires_at <= now:
        raise InvalidInput(f"expires_at {expires_at.isoformat()} is not in the future", field="expires_at")


def entry_uuid(entry_id: str) -> uuid.UUID:
    try:
        return uuid.UUID(entry_id)
    except (ValueError, AttributeError, TypeError):
        raise InvalidInput(f"entry_id {entry_id!r} is not a UUID", field="entry_id") from None


def uuids(ids: Sequence[str]) -> list[uuid.UUID]:
    """The UUIDs among `ids`, in order, each once; what is not a UUID is dropped."""
    wanted: list[uuid.UUID] = []
    for raw in ids:
        try:
            uid = uuid.UUID(raw)
        except (ValueError, AttributeError, TypeError):
            continue
        if uid not in wanted:
            wanted.append(uid)
    return wanted


def sensitive_note(screening: Screening) -> str:
    return f"stored as private instead of shared: the content contains {screening.describe()}"


def _private_fallback_note() -> str:
    return (
        "scope 'private' needs an authenticated user and this call has none: the entry is shared with "
        "every user of the agent"
    )


def effective_visibility(
    requested: Visibility, user_id: str | None, screening: Screening, category: Category
) -> tuple[Visibility, list[str]]:
    """The visibility `store` writes with (module rules of `core.memory.service`) and the notes
    explaining a change; raises `ProfileWithoutUser` or `SensitiveWithoutUser`."""
    notes: list[str] = []
    effective = requested
    if category == PROFILE_CATEGORY and user_id is None:
        raise profile_without_user("content rejected")
    if screening.forces_private:
        if user_id is None:
            raise SensitiveWithoutUser(
                f"content rejected: it contains {screening.describe()}, which may only be stored as a "
                "private entry, and this call has no authenticated user to own it",
                pattern=screening.sensitive[0],
                field="content",
            )
        if requested == "shared":
            notes.append(sensitive_note(screening))
        effective = "private"
    elif category == PROFILE_CATEGORY and requested == "shared":
        assert user_id is not None
        effective = "private"
        notes.append(_profile_private_note(user_id))
    elif requested == "private" and user_id is None:
        effective = "shared"
        notes.append(_private_fallback_note())
    return effective, notes


async def check_capacity(
    tx: MemoryWrites, s: Scope, category: Category, author: str | None, now: datetime
) -> None:
    """`CapacityExceeded` when one more live `category` entry would exceed `LIMITS` (per agent,
    and per `author` when there is one), counted in the write transaction `tx`."""
    limits = LIMITS[category]
    agent_count, user_count = await tx.counts(s, category, author, now)
    if agent_count >= limits.per_agent:
        raise CapacityExceeded(
            f"capacity exceeded: agent {s.agent_id!r} already has {agent_count} {category} entries and "
            f"the limit is {limits.per_agent} {category} entries per agent; forget or replace one first",
            category=category,
            limit_name="per_agent",
            limit=limits.per_agent,
            count=agent_count,
        )
    if author is not None and user_count >= limits.per_user:
        raise CapacityExceeded(
            f"capacity exceeded: user {author!r} already wrote {user_count} {category} entries for agent "
            f"{s.agent_id!r} and the limit is {limits.per_user} {category} entries per user; forget or "
            "replace one first",
            category=category,
            limit_name="per_user",
            limit=limits.per_user,
            count=user_count,
        )
