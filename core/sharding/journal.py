"""`ShardedJournal`: the thread-scoped journal (`core.stores.journal.ThreadJournal`) of a deployment
whose threads are spread over journal shards (`core.sharding.shards`).

It holds the journals of the shards open in this process (`local()`), by shard, and routes every
call that names a thread to the journal of the thread's shard (`shard_of`). A thread whose shard
is not local raises `ShardNotLocal(shard)` before anything is read or written: another node owns
it (or it is moving). `attach(k, journal)` and `detach(k)` change which shards are local while it
serves (the shard of a node's membership moving; today a node opens every shard at start).
Appends listeners (`add_append_listener`) are registered on every local journal and on every one
attached later.

What counts in seqs (`read_from_seq`, `last_seq`, cursors) is not here: seqs count within one
shard, so the relay, verify and rebuild work on each shard's own journal (`local()`).

`ShardedFollower` is the same over read-only views that lag behind their writers (a worker's,
`core.journal.reading.Follower`): it also routes `wait_visible`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Generic, Protocol, TypeVar

from core.errors import ShardNotLocal
from core.journal.models import Message, NewMessage, ThreadRef
from core.journal.reading import Follower
from core.sharding.shards import check_shard, check_shards, shard_of
from core.stores.deletions import JournalDeletion
from core.stores.journal import ThreadJournal

J = TypeVar("J", bound=ThreadJournal)


class ShardedThreadJournal(ThreadJournal, Protocol):
    """Every thread's journal, knowing each thread's shard (what `ShardedJournal` is to its users)."""

    @property
    def shards(self) -> int: ...

    def shard_of(self, thread: ThreadRef) -> int: ...


class ShardedJournal(Generic[J]):
    """The journal of `shards` shards, of which `local` are open here (module doc)."""

    def __init__(self, shards: int, local: Mapping[int, J] | None = None) -> None:
        self._shards = check_shards(shards)
        self._local: dict[int, J] = {}
        self._listeners: list[Callable[[], None]] = []
        for shard, journal in (local or {}).items():
            self.attach(shard, journal)

    @property
    def shards(self) -> int:
        """The deployment's shard count."""
        return self._shards

    def shard_of(self, thread: ThreadRef) -> int:
        """The shard of `thread` (`core.sharding.shards.shard_of`)."""
        return shard_of(thread.environment, thread.account_id, thread.thread_id, self._shards)

    def local(self) -> dict[int, J]:
        """The journals of the shards open here, by shard (ascending)."""
        return dict(sorted(self._local.items()))

    def journal_of(self, thread: ThreadRef) -> J:
        """The journal of `thread`'s shard; ShardNotLocal when it is not open here."""
        shard = self.shard_of(thread)
        journal = self._local.get(shard)
        if journal is None:
            raise ShardNotLocal(
                shard,
                f"thread {thread.thread_id} lives in journal shard {shard}, which is not open on this node",
            )
        return journal

    def attach(self, shard: int, journal: J) -> None:
        """Make `shard` local with `journal` (its open journal); ValueError when it already is."""
        check_shard(shard, self._shards)
        if shard in self._local:
            raise ValueError(f"journal shard {shard} is already attached")
        for listener in self._listeners:
            journal.add_append_listener(listener)
        self._local[shard] = journal

    def detach(self, shard: int) -> J:
        """Stop routing to `shard` and return its journal (the caller closes it); ShardNotLocal when
        it is not local. Calls already routed to it finish on it."""
        journal = self._local.pop(shard, None)
        if journal is None:
            raise ShardNotLocal(shard)
        return journal

    # ---- ThreadJournal -------------------------------------------------------------------------

    async def append(
        self, thread: ThreadRef, agent_id: str, user_id: str | None, messages: Sequence[NewMessage]
    ) -> list[Message]:
        return await self.journal_of(thread).append(thread, agent_id, user_id, messages)

    async def last(self, thread: ThreadRef, n: int) -> list[Message]:
        return await self.journal_of(thread).last(thread, n)

    async def after(self, thread: ThreadRef, offset: int, limit: int = 1000) -> list[Message]:
        return await self.journal_of(thread).after(thread, offset, limit)

    async def delete_thread(self, thread: ThreadRef) -> JournalDeletion:
        return await self.journal_of(thread).delete_thread(thread)

    def add_append_listener(self, listener: Callable[[], None]) -> None:
        """`listener()` after every append to any local shard (and to shards attached later)."""
        self._listeners.append(listener)
        for journal in self._local.values():
            journal.add_append_listener(listener)

    async def ready(self) -> None:
        """Return when every local shard's journal is ready; the first one's error otherwise."""
        await asyncio.gather(*(journal.ready() for journal in self.local().values()))

    async def close(self) -> None:
        """Close every local shard's journal (all of them, even when one fails; the first error is
        raised) and detach them."""
        journals = list(self.local().values())
        self._local.clear()
        results = await asyncio.gather(*(journal.close() for journal in journals), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result


class FollowingJournal(ThreadJournal, Follower, Protocol):
    """A thread-scoped journal view that may lag behind its writer (`Follower`)."""


F = TypeVar("F", bound=FollowingJournal)


class ShardedFollower(ShardedJournal[F]):
    """`ShardedJournal` over followers: `wait_visible` goes to the thread's shard too (module doc)."""

    async def wait_visible(self, thread: ThreadRef, offset: int) -> None:
        await self.journal_of(thread).wait_visible(thread, offset)
