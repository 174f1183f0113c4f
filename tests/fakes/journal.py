"""`InMemoryJournal`: the `Journal` (`core.stores.journal`) in memory.

The contract suite (`tests/core/stores/test_journal.py`) asserts offsets, seqs and idempotency in
full, and this fake meets it: an append is validated first (ids, at most 1000 messages, message
ids unique within the call, valid Unicode, at most `max_message_bytes` encoded) and writes nothing
when anything is invalid; its messages get consecutive per-thread offsets and global seqs; a
message id already stored for the (environment, account) returns the stored message when the
thread, role, content, reasoning and tool call are the same, else raises Conflict (and nothing of
the call is written). Every append is durable at once. `delete_thread` removes a thread's messages
(seqs are never reused; the thread's offsets start again at 0).

`fence()` makes every later call raise JournalFenced (another writer opened the journal); after
`close()` every call raises JournalUnavailable.
"""

from __future__ import annotations

import bisect
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from core.errors import InvalidInput, JournalFenced, JournalUnavailable
from core.ids import ENVIRONMENT, ID
from core.journal.append_rules import check_messages, check_retry
from core.journal.models import Message, NewMessage, ThreadRef
from core.journal.tokens import message_token_count
from core.stores.deletions import JournalDeletion, seq_ranges

MAX_NUMBER = (1 << 64) - 1

ThreadKey = tuple[str, str, str]


def _thread_key(thread: ThreadRef) -> ThreadKey:
    ENVIRONMENT.require(thread.environment, "environment")
    ID.require(thread.account_id, "account_id")
    ID.require(thread.thread_id, "thread_id")
    return (thread.environment, thread.account_id, thread.thread_id)


def _count(value: int, name: str, low: int = 0) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= MAX_NUMBER:
        raise InvalidInput(f"{name} must be an integer from {low} to {MAX_NUMBER}", field=name)


class InMemoryJournal:
    """See the module doc."""

    def __init__(self, *, max_message_bytes: int = 1_000_000, shard: int = 0) -> None:
        self.max_message_bytes = max_message_bytes
        self.shard = shard
        """The journal shard this is: its messages carry it (`Message.shard`)."""
        self.threads: dict[ThreadKey, list[Message]] = {}
        self.by_seq: list[Message] = []
        self._last_seq = 0
        self.cursors: dict[str, int] = {}
        self._ids: dict[tuple[str, str, str], Message] = {}
        self._fenced = False
        self._closed = False
        self._listeners: list[Callable[[], None]] = []

    def fence(self) -> None:
        """Another writer opened the journal: every later call raises JournalFenced."""
        self._fenced = True

    def _usable(self) -> None:
        if self._fenced:
            raise JournalFenced("in-memory journal: opened by another writer; this writer is fenced")
        if self._closed:
            raise JournalUnavailable("the in-memory journal is closed")

    def _validate(self, agent_id: str, user_id: str | None, messages: Sequence[NewMessage]) -> None:
        ID.require(agent_id, "agent_id")
        if user_id is not None:
            ID.require(user_id, "user_id")
        check_messages(messages, self.max_message_bytes)

    def _stored(self, thread: ThreadRef, new: NewMessage) -> Message | None:
        if new.message_id is None:
            return None
        stored = self._ids.get((thread.environment, thread.account_id, new.message_id))
        if stored is None:
            return None
        return check_retry(new, stored, thread.thread_id)

    async def append(
        self, thread: ThreadRef, agent_id: str, user_id: str | None, messages: Sequence[NewMessage]
    ) -> list[Message]:
        self._usable()
        key = _thread_key(thread)
        self._validate(agent_id, user_id, messages)
        existing = [self._stored(thread, new) for new in messages]
        rows = self.threads.setdefault(key, [])
        now = datetime.now(UTC)
        result: list[Message] = []
        for new, stored in zip(messages, existing, strict=True):
            if stored is not None:
                result.append(stored)
                continue
            message = Message(
                message_id=new.message_id or uuid.uuid4().hex,
                environment=thread.environment,
                account_id=thread.account_id,
                agent_id=agent_id,
                user_id=user_id,
                thread_id=thread.thread_id,
                offset=len(rows),
                seq=self._last_seq + 1,
                role=new.role,
                content=new.content,
                reasoning=new.reasoning,
                tool_call=new.tool_call,
                created_at=new.created_at or now,
                token_count=message_token_count(new),
                shard=self.shard,
            )
            rows.append(message)
            self.by_seq.append(message)
            self._last_seq = message.seq
            self._ids[(thread.environment, thread.account_id, message.message_id)] = message
            result.append(message)
        if any(stored is None for stored in existing):
            for listener in self._listeners:
                listener()
        return result

    def add_append_listener(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    async def last(self, thread: ThreadRef, n: int) -> list[Message]:
        self._usable()
        key = _thread_key(thread)
        _count(n, "n")
        return self.threads.get(key, [])[-n:] if n else []

    async def after(self, thread: ThreadRef, offset: int, limit: int = 1000) -> list[Message]:
        self._usable()
        key = _thread_key(thread)
        _count(limit, "limit")
        _count(offset, "offset", low=-1)
        return self.threads.get(key, [])[offset + 1 : offset + 1 + limit]

    async def read_from_seq(self, after_seq: int, limit: int) -> list[Message]:
        self._usable()
        _count(after_seq, "after_seq")
        _count(limit, "limit")
        start = bisect.bisect_right(self.by_seq, after_seq, key=lambda m: m.seq)
        return self.by_seq[start : start + limit]

    async def last_seq(self) -> int:
        self._usable()
        return self._last_seq

    async def ready(self) -> None:
        self._usable()

    async def delete_thread(self, thread: ThreadRef) -> JournalDeletion:
        self._usable()
        gone = self.threads.pop(_thread_key(thread), [])
        seqs = {m.seq for m in gone}
        self.by_seq = [m for m in self.by_seq if m.seq not in seqs]
        for message in gone:
            self._ids.pop((thread.environment, thread.account_id, message.message_id), None)
        return JournalDeletion(messages=len(gone), up_to_seq=max(seqs, default=0), seqs=seq_ranges(seqs))

    async def get_cursor(self, name: str) -> int:
        self._usable()
        ID.require(name, "cursor name")
        return self.cursors.get(name, 0)

    async def set_cursor(self, name: str, seq: int) -> None:
        self._usable()
        ID.require(name, "cursor name")
        _count(seq, "seq")
        self.cursors[name] = seq

    async def close(self) -> None:
        self._closed = True
