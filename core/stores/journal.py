"""The journal interface every other component codes against.

Contract:
- `append` validates everything first and writes nothing if any message is invalid (InvalidInput).
  It returns only when the messages are durable. Messages of one call are written atomically, get
  consecutive per-thread offsets and consecutive `seq`s of the journal. A `message_id` already in the
  journal for the same (environment, account) with the same thread/role/content/reasoning/tool_call
  returns the stored message again (idempotent retry); with different content it raises Conflict.
- After another writer has opened the same journal, every call raises JournalFenced.
- Storage errors raise JournalUnavailable; there is no fallback and no cache.
- `delete_thread(thread)` deletes every message of the thread (rows and indexes) in one durable
  write, serialized with the appends: every append acknowledged before it is deleted, every one
  after it kept. Seqs are never reused (a later append gets a seq above every deleted one); the
  thread's offsets start again at 0. Returns what it deleted (`core.stores.deletions`);
  idempotent (nothing left: 0 messages).
- `add_append_listener(listener)`: `listener()` is called after every append that wrote new
  messages, once they are durable and readable (what wakes the relay), and possibly after others
  (e.g. an idempotent retry); it must be quick and must not block.
- `ready()` returns when the journal can serve calls, else raises what a call would (JournalFenced,
  JournalUnavailable): what `/readyz` asks.

Two levels (`core.sharding.shards`): `ThreadJournal` is what names a thread (appends, a thread's
reads, its deletion); every journal has it, and so has `core.sharding.journal.ShardedJournal`,
which routes each thread to the journal of its shard. `Journal` adds what counts in `seq`s (the
relay's reads, the last seq, the named cursors): seqs count within one journal (shard), so only a
single shard's journal has them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from core.journal.models import Message, NewMessage, ThreadRef
from core.stores.deletions import JournalDeletion


class ThreadJournal(Protocol):
    """The thread-scoped part of a journal (module doc)."""

    async def append(
        self, thread: ThreadRef, agent_id: str, user_id: str | None, messages: Sequence[NewMessage]
    ) -> list[Message]:
        """Append durably; see the module contract."""
        ...

    async def last(self, thread: ThreadRef, n: int) -> list[Message]:
        """The last `n` messages of a thread, oldest first."""
        ...

    async def after(self, thread: ThreadRef, offset: int, limit: int = 1000) -> list[Message]:
        """Messages with offset > `offset` (use -1 for the start), oldest first, at most `limit`."""
        ...

    async def delete_thread(self, thread: ThreadRef) -> JournalDeletion:
        """Delete every message of `thread`; see the module contract."""
        ...

    def add_append_listener(self, listener: Callable[[], None]) -> None:
        """Call `listener()` after every append that wrote new messages (module contract)."""
        ...

    async def ready(self) -> None:
        """Return when the journal can serve calls; raise what a call would otherwise."""
        ...

    async def close(self) -> None: ...


class Journal(ThreadJournal, Protocol):
    """One journal (shard): the thread-scoped calls and those that count in its seqs (module doc)."""

    async def read_from_seq(self, after_seq: int, limit: int) -> list[Message]:
        """Messages with seq > `after_seq` in seq order, at most `limit` (the relay's read)."""
        ...

    async def last_seq(self) -> int:
        """The highest durable seq (0 when empty)."""
        ...

    async def get_cursor(self, name: str) -> int:
        """A named durable cursor (e.g. the relay's last published seq); 0 when never set."""
        ...

    async def set_cursor(self, name: str, seq: int) -> None:
        """Store a named cursor durably; returns when durable."""
        ...
