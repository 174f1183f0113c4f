"""Threads: the tenancy record of a conversation, its metadata rules, and the service over them.

A thread is identified by (environment, account_id, thread_id) and belongs to one agent and at
most one user; `agent_id` and `user_id` never change once the thread exists. Its `metadata` is a
JSON object of at most `MAX_METADATA_BYTES`; the one key memstream reads is
`metadata.config.max_working_memory_messages`, an integer 1..20 that can only LOWER the fixed
20-message context window.

`ThreadService` is the only way the API touches threads and the journal for a thread:
- every call is scoped by the caller's `Principal` (account + environment): a thread of another
  account is simply not found, whatever its id;
- every invalid input raises `InvalidInput` (with the field) before anything is written;
- appending to a missing thread creates it when the append names `agent_id`, in a transaction
  that is rolled back when the journal rejects the messages (so a rejected append leaves no
  thread behind).

`ThreadStore` is the storage interface (`sinks.postgres.threads.PostgresThreadStore`).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Any, NamedTuple, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict

from core.auth import Principal
from core.errors import Conflict, InvalidInput, JournalUnavailable, MemstreamError, NotFound, ShardNotLocal
from core.ids import require_id
from core.inputs import check_json_value
from core.journal.models import Message, NewMessage, ThreadRef
from core.stores.journal import ThreadJournal

MAX_WINDOW_MESSAGES = 20
DEFAULT_LIST_LIMIT = 50
MAX_LIST_LIMIT = 500
MAX_METADATA_BYTES = 64 * 1024
MAX_METADATA_DEPTH = 32
WINDOW_FIELD = "metadata.config.max_working_memory_messages"

T = TypeVar("T")


class ThreadPage(NamedTuple):
    threads: list[Thread]
    next_cursor: str | None
    """The last thread id of this page when more follow (pass it as `cursor`); None on the last page."""


class Thread(BaseModel):
    """A stored thread."""

    model_config = ConfigDict(frozen=True)

    environment: str
    account_id: str
    thread_id: str
    agent_id: str
    user_id: str | None
    metadata: dict[str, Any]
    created_at: datetime
    updated_at: datetime

    @property
    def ref(self) -> ThreadRef:
        return ThreadRef(environment=self.environment, account_id=self.account_id, thread_id=self.thread_id)

    @property
    def window_size(self) -> int:
        """How many recent messages the context window holds: min(20, the configured limit)."""
        config = self.metadata.get("config")
        if isinstance(config, dict):
            value = config.get("max_working_memory_messages")
            if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
                return min(MAX_WINDOW_MESSAGES, value)
        return MAX_WINDOW_MESSAGES


# ---- metadata rules ---------------------------------------------------------------------------


def _type_name(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number with a fraction" if not value.is_integer() else "a decimal number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _check_values(metadata: dict[str, Any]) -> None:
    """Reject what JSON/jsonb cannot hold: NUL characters, lone surrogates, NaN/Infinity, non-JSON
    types, deep nesting."""
    check_json_value(metadata, "metadata", max_depth=MAX_METADATA_DEPTH)


def _check_config(metadata: dict[str, Any]) -> None:
    if "config" not in metadata:
        return
    config = metadata["config"]
    if not isinstance(config, dict):
        raise InvalidInput(
            f"metadata.config must be an object, got {_type_name(config)}", field="metadata.config"
        )
    if "max_working_memory_messages" not in config:
        return
    value = config["max_working_memory_messages"]
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(
            f"{WINDOW_FIELD} must be an integer from 1 to {MAX_WINDOW_MESSAGES}, got {_type_name(value)}",
            field=WINDOW_FIELD,
        )
    if not 1 <= value <= MAX_WINDOW_MESSAGES:
        raise InvalidInput(
            f"{WINDOW_FIELD} must be from 1 to {MAX_WINDOW_MESSAGES}, got {value}: it can only lower "
            f"the fixed {MAX_WINDOW_MESSAGES}-message window",
            field=WINDOW_FIELD,
        )


def validate_metadata(metadata: object) -> dict[str, Any]:
    """Return `metadata` when it is valid thread metadata; InvalidInput naming the field otherwise."""
    if not isinstance(metadata, dict):
        raise InvalidInput(f"metadata must be a JSON object, got {_type_name(metadata)}", field="metadata")
    _check_values(metadata)
    size = len(json.dumps(metadata, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
    if size > MAX_METADATA_BYTES:
        raise InvalidInput(
            f"metadata is {size} bytes of JSON; the limit is {MAX_METADATA_BYTES} bytes", field="metadata"
        )
    _check_config(metadata)
    return metadata


def merge_patch(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """JSON Merge Patch (RFC 7396): objects merge recursively, `null` removes a key, the rest replaces."""
    result = dict(target)
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            current = result.get(key)
            result[key] = merge_patch(current if isinstance(current, dict) else {}, value)
        else:
            result[key] = value
    return result


def check_thread_id(value: str, field: str) -> str:
    """`value` when it is a valid id (`core.ids.ID`); InvalidInput naming `field` otherwise."""
    return require_id(value, field)


# ---- storage interface ------------------------------------------------------------------------


class ThreadStore(Protocol):
    """Thread rows. Every method names the full scope (environment, account_id, thread_id)."""

    async def get(self, environment: str, account_id: str, thread_id: str) -> Thread | None: ...

    async def upsert(
        self,
        environment: str,
        account_id: str,
        thread_id: str,
        agent_id: str,
        user_id: str | None,
        metadata: dict[str, Any],
    ) -> tuple[Thread, bool]:
        """Insert the thread, or replace its metadata when its agent_id and user_id equal these.

        Returns (the row as stored now, whether it was inserted). When the stored thread has
        another agent_id/user_id nothing is written and the stored row is returned unchanged.
        """
        ...

    def creating(
        self, environment: str, account_id: str, thread_id: str, agent_id: str, user_id: str | None
    ) -> AbstractAsyncContextManager[Thread]:
        """Insert the thread unless it exists, in a transaction held open for the `async with` block.

        Yields the thread (new or existing). The transaction commits when the block exits normally
        and rolls back when it raises. Concurrent creators of the same thread wait for it.
        """
        ...

    async def list_threads(
        self,
        environment: str,
        account_id: str,
        *,
        agent_id: str | None = None,
        user_id: str | None = None,
        after: str | None = None,
        limit: int,
    ) -> list[Thread]:
        """The account's threads by thread_id, those after `after` (exclusive), at most `limit`;
        only `agent_id`'s and `user_id`'s when given."""
        ...

    async def agent_ids(self, environment: str, account_id: str) -> list[str]:
        """The distinct agents of the account's threads, sorted."""
        ...

    async def update_metadata(
        self,
        environment: str,
        account_id: str,
        thread_id: str,
        update: Callable[[dict[str, Any]], dict[str, Any]],
    ) -> Thread | None:
        """Replace metadata with `update(current)` atomically (row locked); None if no such thread.

        When `update` raises, nothing is written.
        """
        ...

    async def delete(self, environment: str, account_id: str, thread_id: str) -> bool:
        """Delete the thread's row (a thread deletion's step); False when there was none."""
        ...


# ---- the service ------------------------------------------------------------------------------


async def journal_call(call: Awaitable[T], action: str) -> T:
    """Await a journal call, turning unexpected failures into JournalUnavailable (no fallback)."""
    try:
        return await call
    except MemstreamError:
        raise
    except Exception as exc:
        raise JournalUnavailable(f"the journal failed while {action}: {type(exc).__name__}: {exc}") from exc


class ThreadService:
    """Thread operations of one caller (a `Principal`), over a `ThreadStore` and the journal."""

    def __init__(self, store: ThreadStore, journal: ThreadJournal) -> None:
        self._store = store
        self._journal = journal

    async def list_threads(
        self,
        principal: Principal,
        *,
        agent_id: str | None = None,
        user_id: str | None = None,
        cursor: str | None = None,
        limit: int = DEFAULT_LIST_LIMIT,
    ) -> ThreadPage:
        """A page of the caller's account's threads, by thread_id: `limit` (1..MAX_LIST_LIMIT) after
        the thread id `cursor` (a page's `next_cursor`), only `agent_id`'s and `user_id`'s when
        given. InvalidInput on a bad id or limit."""
        for value, field in ((agent_id, "agent_id"), (user_id, "user_id"), (cursor, "cursor")):
            if value is not None:
                require_id(value, field)
        if not 1 <= limit <= MAX_LIST_LIMIT:
            raise InvalidInput(f"limit must be 1-{MAX_LIST_LIMIT}, not {limit}", field="limit")
        found = await self._store.list_threads(
            principal.environment,
            principal.account_id,
            agent_id=agent_id,
            user_id=user_id,
            after=cursor,
            limit=limit + 1,  # one more: is there a next page?
        )
        page = found[:limit]
        return ThreadPage(page, page[-1].thread_id if len(found) > limit else None)

    async def agent_ids(self, principal: Principal) -> list[str]:
        """The agents of the caller's account's threads, sorted."""
        return await self._store.agent_ids(principal.environment, principal.account_id)

    async def get(self, principal: Principal, thread_id: str) -> Thread:
        """The caller's thread; NotFound when the caller's account has none with this id."""
        check_thread_id(thread_id, "thread_id")
        thread = await self._store.get(principal.environment, principal.account_id, thread_id)
        if thread is None:
            raise NotFound(
                f"thread {thread_id!r} does not exist: create it with PUT /v1/threads/{thread_id} "
                "or append to it with an agent_id"
            )
        return thread

    async def put(
        self,
        principal: Principal,
        thread_id: str,
        *,
        agent_id: str,
        user_id: str | None,
        metadata: object,
    ) -> tuple[Thread, bool]:
        """Create the thread, or replace its metadata. Returns (thread, created).

        Conflict when the thread exists with another agent_id or user_id (nothing written).
        """
        check_thread_id(thread_id, "thread_id")
        check_thread_id(agent_id, "agent_id")
        if user_id is not None:
            check_thread_id(user_id, "user_id")
        valid = validate_metadata(metadata)
        thread, created = await self._store.upsert(
            principal.environment, principal.account_id, thread_id, agent_id, user_id, valid
        )
        _check_identity(thread, agent_id, user_id, action="update", exact=True)
        return thread, created

    async def patch_metadata(self, principal: Principal, thread_id: str, patch: object) -> Thread:
        """Merge `patch` into the metadata (JSON Merge Patch: null removes a key) and validate the result."""
        check_thread_id(thread_id, "thread_id")
        if not isinstance(patch, dict):
            raise InvalidInput(f"metadata must be a JSON object, got {_type_name(patch)}", field="metadata")
        _check_values(patch)

        def update(current: dict[str, Any]) -> dict[str, Any]:
            return validate_metadata(merge_patch(current, patch))

        thread = await self._store.update_metadata(
            principal.environment, principal.account_id, thread_id, update
        )
        if thread is None:
            raise NotFound(f"thread {thread_id!r} does not exist: create it with PUT /v1/threads/{thread_id}")
        return thread

    async def append(
        self,
        principal: Principal,
        thread_id: str,
        *,
        agent_id: str | None,
        user_id: str | None,
        messages: Sequence[NewMessage],
    ) -> list[Message]:
        """Append durably to the caller's thread; returns the stored messages once durable.

        A missing thread is created when `agent_id` is given (NotFound otherwise). An agent_id or
        user_id that contradicts the thread raises Conflict. Messages go to the journal under the
        thread's own agent_id/user_id. InvalidInput/Conflict from the journal mean nothing was
        written — including the thread row this call would have created.
        """
        check_thread_id(thread_id, "thread_id")
        if agent_id is not None:
            check_thread_id(agent_id, "agent_id")
        if user_id is not None:
            check_thread_id(user_id, "user_id")
        if not messages:
            raise InvalidInput("an append needs at least one message", field="messages")
        env, account = principal.environment, principal.account_id
        thread = await self._store.get(env, account, thread_id)
        if thread is not None:
            _check_identity(thread, agent_id, user_id, action="append to")
            return await self._journal_append(thread, messages)
        if agent_id is None:
            raise NotFound(
                f"thread {thread_id!r} does not exist: create it with PUT /v1/threads/{thread_id} "
                "or pass agent_id (and user_id) in the append body to create it"
            )
        kept_error: BaseException | None = None
        async with self._store.creating(env, account, thread_id, agent_id, user_id) as thread:
            _check_identity(thread, agent_id, user_id, action="append to")
            try:
                return await self._journal_append(thread, messages)
            except (InvalidInput, Conflict, ShardNotLocal):
                raise  # nothing written: roll the new thread back (its shard's owner creates it)
            except Exception as exc:  # the journal may have written: keep the thread row
                kept_error = exc
        assert kept_error is not None
        raise kept_error

    async def messages_after(
        self, principal: Principal, thread_id: str, after: int, limit: int
    ) -> list[Message]:
        """Messages of the caller's thread with offset > `after`, oldest first, at most `limit`."""
        if after < -1:
            raise InvalidInput(f"after must be >= -1, got {after}", field="after")
        if not 1 <= limit <= 1000:
            raise InvalidInput(f"limit must be from 1 to 1000, got {limit}", field="limit")
        thread = await self.get(principal, thread_id)
        return await journal_call(self._journal.after(thread.ref, after, limit), "reading messages")

    async def _journal_append(self, thread: Thread, messages: Sequence[NewMessage]) -> list[Message]:
        return await journal_call(
            self._journal.append(thread.ref, thread.agent_id, thread.user_id, messages), "appending"
        )


def _check_identity(
    thread: Thread, agent_id: str | None, user_id: str | None, *, action: str, exact: bool = False
) -> None:
    """Conflict when agent_id/user_id contradict the thread.

    `exact` (PUT, a full representation): user_id must equal the thread's, None included.
    Otherwise (append) None means "whatever the thread has".
    """
    if agent_id is not None and agent_id != thread.agent_id:
        raise Conflict(
            f"thread {thread.thread_id!r} belongs to agent {thread.agent_id!r}; cannot {action} it as "
            f"agent {agent_id!r} (a thread's agent_id never changes)"
        )
    if (exact or user_id is not None) and user_id != thread.user_id:
        owner = "has no user" if thread.user_id is None else f"belongs to user {thread.user_id!r}"
        who = "no user" if user_id is None else f"user {user_id!r}"
        raise Conflict(
            f"thread {thread.thread_id!r} {owner}; cannot {action} it as {who} "
            "(a thread's user_id never changes)"
        )
