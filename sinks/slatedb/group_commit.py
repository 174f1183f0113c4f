"""The journal's write path: group commit (`GroupCommit`, owned by `SlateJournal`).

`submit` queues one validated append and waits. One writer task takes everything pending (up to
`MAX_GROUP_MESSAGES`), resolves message-id retries, allocates per-thread offsets and global seqs,
writes ONE atomic `WriteBatch` (message rows + seq index + message-id index), awaits its
durability, and only then resolves every caller. One group is in flight at a time, so seqs become
durable in order. After each group is durable, the listeners run (`add_listener`). The in-memory
counters (next offset per thread, last seq) only advance after a group is durable; if a group
fails, the counters are dropped and re-derived from storage on next use (the failed batch may
still be in SlateDB's memtable, so offsets are never reused), and only that group's callers fail.
A thread deletion (`delete_thread`, `sinks.slatedb.thread_delete`) is queued like an append and
runs alone between two groups; it makes the caches forget what it deleted.
The last durable messages are kept for the relay's reads (`read_recent`, `sinks.slatedb.recent`),
the last of recently read threads for `last` (`windows`, `sinks.slatedb.windows`).

Storage failures are translated by the journal's `storage_errors` (which fences this writer when
SlateDB says so: `fence`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from slatedb.uniffi import Db, WriteBatch

from core.errors import Conflict, JournalUnavailable, MemstreamError
from core.journal.append_rules import check_retry
from core.journal.models import Message, NewMessage, ThreadRef
from core.metrics import JOURNAL_APPEND_DURATION, JOURNAL_GROUP_MESSAGES, MESSAGES_APPENDED, child
from core.stores.deletions import JournalDeletion
from sinks.slatedb import keys
from sinks.slatedb.binding import ALL, DURABLE_DESC, LATEST_DESC, get_all
from sinks.slatedb.recent import RecentMessages
from sinks.slatedb.thread_delete import plan_delete, read_seq_floor
from sinks.slatedb.windows import ThreadWindows

log = logging.getLogger("memstream.journal")

MAX_GROUP_MESSAGES = 10_000
"""A writer group takes pending appends until it holds at least this many messages."""
THREAD_CACHE_SIZE = 100_000
"""Next-offset entries kept in memory (LRU); an evicted thread is re-derived with one scan."""


@dataclass(frozen=True)
class JournalStats:
    """Counters since open: `batches` < `appends` shows that group commit batches."""

    appends: int = 0
    messages: int = 0
    batches: int = 0


@dataclass
class Item:
    """One validated message of an append, with its final message_id and token count."""

    new: NewMessage
    message_id: str
    token_count: int


@dataclass
class _Request:
    thread: ThreadRef
    agent_id: str
    user_id: str | None
    items: list[Item]
    future: asyncio.Future[list[Message]]


@dataclass
class _Delete:
    thread: ThreadRef
    future: asyncio.Future[JournalDeletion]


@dataclass
class _Plan:
    """What one group writes, and what each of its requests gets once that is durable."""

    rows: list[tuple[bytes, bytes]] = field(default_factory=list)
    outcomes: list[tuple[_Request, list[Message] | MemstreamError]] = field(default_factory=list)
    next_offsets: dict[bytes, int] = field(default_factory=dict)
    last_seq: int = 0
    new_messages: int = 0
    written: list[tuple[Message, int]] = field(default_factory=list)  # in seq order, row sizes


class GroupCommit:
    """The queue, the writer task and the counters of one journal (see the module doc)."""

    def __init__(
        self,
        db: Db,
        url: str,
        *,
        write_timeout_s: float,
        storage_errors: Callable[[str], AbstractContextManager[None]],
        fenced_error: Callable[[], MemstreamError],
        shard: int = 0,
    ) -> None:
        self._db = db
        self._url = url
        self._shard = shard
        self.write_timeout_s = write_timeout_s
        """Bound on the wait for durability of one group (JournalUnavailable when exceeded)."""
        self._storage_errors = storage_errors
        self._fenced_error = fenced_error
        self._next_offsets: OrderedDict[bytes, int] = OrderedDict()
        self._alloc_seq: int | None = None  # last seq allocated and durable; None: re-derive
        self._durable_seq = 0
        self._uncertain = False  # a failed batch may linger in the memtable
        self._pending: list[_Request | _Delete] = []
        self._wake = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None
        self._fenced = False
        self._closing = False
        self._listeners: list[Callable[[], None]] = []
        self._recent = RecentMessages()
        self.windows = ThreadWindows()
        """The last messages of recently read threads, for `last` (`sinks.slatedb.windows`)."""
        self._appends = 0
        self._messages = 0
        self._batches = 0

    async def recover(self) -> None:
        """Read the last durable seq from storage (once, on open)."""
        self._durable_seq = await self._scan_last_seq(durable_only=True)
        self._alloc_seq = self._durable_seq

    @property
    def durable_seq(self) -> int:
        return self._durable_seq

    def read_recent(self, after_seq: int, limit: int) -> list[Message] | None:
        """`read_from_seq` answered from the messages this writer made durable last, or None
        when they do not cover it (`sinks.slatedb.recent`)."""
        return self._recent.read(after_seq, limit, self._durable_seq)

    @property
    def stats(self) -> JournalStats:
        return JournalStats(appends=self._appends, messages=self._messages, batches=self._batches)

    def add_listener(self, listener: Callable[[], None]) -> None:
        """Call `listener()` in the writer task after every group commit that succeeded; an
        exception it raises is logged and does not affect the append."""
        self._listeners.append(listener)

    async def submit(
        self, thread: ThreadRef, agent_id: str, user_id: str | None, items: list[Item]
    ) -> list[Message]:
        """Queue one append and wait until it is durable (or failed)."""
        future: asyncio.Future[list[Message]] = asyncio.get_running_loop().create_future()
        started = time.perf_counter()
        self._pending.append(_Request(thread, agent_id, user_id, items, future))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._run_writer(), name=f"journal-writer {self._url}")
        self._wake.set()
        messages = await future
        JOURNAL_APPEND_DURATION.observe(time.perf_counter() - started)
        return messages

    async def delete_thread(self, thread: ThreadRef) -> JournalDeletion:
        """Queue the deletion of every row of `thread` and wait until it is durable (module doc)."""
        future: asyncio.Future[JournalDeletion] = asyncio.get_running_loop().create_future()
        self._pending.append(_Delete(thread, future))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._run_writer(), name=f"journal-writer {self._url}")
        self._wake.set()
        return await future

    def fence(self) -> None:
        """Another writer took the journal: fail everything queued; the writer task ends."""
        self._fenced = True
        self.fail_pending(self._fenced_error())
        self._wake.set()

    async def close(self) -> None:
        """Finish the queued appends, end the writer task, fail anything queued after that."""
        self._closing = True
        self._wake.set()
        if self._writer is not None:
            await asyncio.gather(self._writer, return_exceptions=True)
        self.fail_pending(JournalUnavailable(f"the journal at {self._url} was closed"))

    def fail_pending(self, error: MemstreamError) -> None:
        pending, self._pending = self._pending, []
        for request in pending:
            _settle(request.future, error)

    # ---- the writer task -----------------------------------------------------------------------

    async def _run_writer(self) -> None:
        try:
            while True:
                if not self._pending:
                    if self._closing or self._fenced:
                        return
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                first = self._pending[0]
                if isinstance(first, _Delete):
                    del self._pending[0]
                    try:
                        await self._delete(first)
                    except Exception as exc:  # a bug: fail this deletion, keep serving
                        self._invalidate()
                        _settle(first.future, exc)
                    continue
                group = self._take_group()
                try:
                    await self._commit(group)
                except Exception as exc:  # a bug: fail this group, keep serving
                    self._invalidate()
                    for request in group:
                        _settle(request.future, exc)
        finally:
            self.fail_pending(
                self._fenced_error()
                if self._fenced
                else JournalUnavailable(f"the journal at {self._url} was closed")
            )

    def _take_group(self) -> list[_Request]:
        """Everything pending, up to MAX_GROUP_MESSAGES (always at least one request)."""
        count = size = 0
        for request in self._pending:
            if size >= MAX_GROUP_MESSAGES or isinstance(request, _Delete):
                break
            size += len(request.items)
            count += 1
        group = [r for r in self._pending[:count] if isinstance(r, _Request)]
        del self._pending[:count]
        return [r for r in group if not r.future.done()]  # drop callers that were cancelled

    async def _delete(self, request: _Delete) -> None:
        """Delete a thread's rows in one durable batch with the seq floor (module doc)."""
        if self._fenced:
            _settle(request.future, self._fenced_error())
            return
        try:
            with self._storage_errors("deleting a thread"):
                if self._alloc_seq is None:
                    self._alloc_seq = await self._scan_last_seq(durable_only=False)
                doomed, deleted = await plan_delete(self._db, self._url, request.thread)
                batch = WriteBatch()
                for key in doomed:
                    batch.delete(key)
                batch.put(keys.SEQ_FLOOR_KEY, str(self._alloc_seq).encode("ascii"))
                if deleted.messages:
                    batch.put(keys.deleted_key(request.thread), str(deleted.up_to_seq).encode("ascii"))
                handle = await self._db.write(batch)
                await asyncio.wait_for(handle.await_durable(), self.write_timeout_s)
        except MemstreamError as exc:
            self._invalidate()
            _settle(request.future, exc)
            if self._fenced:
                self.fail_pending(self._fenced_error())
            return
        self._uncertain = False
        self._next_offsets.pop(keys.thread_prefix(request.thread), None)
        self._recent.clear()
        self.windows.invalidate()
        _settle(request.future, deleted)

    async def _commit(self, group: list[_Request]) -> None:
        if not group:
            return
        if self._fenced:
            for request in group:
                _settle(request.future, self._fenced_error())
            return
        try:
            with self._storage_errors("preparing an append"):
                plan = await self._plan(group)
            if plan.rows:
                self._batches += 1
                with self._storage_errors("writing an append"):
                    batch = WriteBatch()
                    for key, value in plan.rows:
                        batch.put(key, value)
                    handle = await self._db.write(batch)
                    await asyncio.wait_for(handle.await_durable(), self.write_timeout_s)
            elif self._uncertain:  # retries answered from a batch that failed: make it durable
                with self._storage_errors("flushing"):
                    await asyncio.wait_for(self._db.flush(), self.write_timeout_s)
        except MemstreamError as exc:
            self._invalidate()
            for request in group:
                _settle(request.future, exc)
            if self._fenced:
                self.fail_pending(self._fenced_error())
            return
        self._uncertain = False
        for prefix, next_offset in plan.next_offsets.items():
            self._remember_offset(prefix, next_offset)
        self._alloc_seq = plan.last_seq
        self._durable_seq = max(self._durable_seq, plan.last_seq)
        self._recent.add(plan.written)
        self.windows.add(plan.written)
        self._appends += len(group)
        self._messages += plan.new_messages
        _count_written(plan.written)
        for request, outcome in plan.outcomes:
            _settle(request.future, outcome)
        for listener in self._listeners:
            try:
                listener()
            except Exception:
                log.exception("journal append listener %r failed", listener)

    async def _plan(self, group: list[_Request]) -> _Plan:
        """Allocate offsets and seqs for the group; a request with a Conflict writes nothing."""
        if self._alloc_seq is None:
            self._alloc_seq = await self._scan_last_seq(durable_only=False)
        plan = _Plan(last_seq=self._alloc_seq)
        by_id = await self._stored_by_id(group)
        in_group: dict[bytes, Message] = {}
        now = datetime.now(UTC)
        for request in group:
            thread = request.thread
            try:
                existing = [_existing(thread, item, in_group, by_id) for item in request.items]
            except Conflict as exc:
                plan.outcomes.append((request, exc))
                continue
            prefix = keys.thread_prefix(thread)
            if prefix in plan.next_offsets:
                offset = plan.next_offsets[prefix]
            else:
                offset = await self._next_offset(prefix)
            result: list[Message] = []
            for item, stored in zip(request.items, existing, strict=True):
                if stored is not None:
                    result.append(stored)
                    continue
                plan.last_seq += 1
                message = Message(
                    message_id=item.message_id,
                    environment=thread.environment,
                    account_id=thread.account_id,
                    agent_id=request.agent_id,
                    user_id=request.user_id,
                    thread_id=thread.thread_id,
                    offset=offset,
                    seq=plan.last_seq,
                    role=item.new.role,
                    content=item.new.content,
                    reasoning=item.new.reasoning,
                    tool_call=item.new.tool_call,
                    created_at=item.new.created_at or now,
                    token_count=item.token_count,
                    shard=self._shard,
                )
                row_key = prefix + keys.offset_suffix(offset)
                id_key = keys.message_id_key(thread.environment, thread.account_id, item.message_id)
                row = message.stored_json()
                plan.rows.append((row_key, row))
                plan.written.append((message, len(row)))
                plan.rows.append((keys.seq_key(plan.last_seq), row_key))
                plan.rows.append((id_key, row_key))
                in_group[id_key] = message
                result.append(message)
                offset += 1
                plan.new_messages += 1
            plan.next_offsets[prefix] = offset
            plan.outcomes.append((request, result))
        return plan

    async def _stored_by_id(self, group: list[_Request]) -> dict[bytes, Message]:
        """The stored message of every client-given message_id of the group that has one.

        The id-index reads of the whole group are issued together, then the rows they point to,
        so a group costs two waits on SlateDB instead of one or two per message. Reads see the
        latest writes (a failed batch that lingers in the memtable included), as before.
        """
        id_keys = list(
            dict.fromkeys(
                keys.message_id_key(r.thread.environment, r.thread.account_id, item.message_id)
                for r in group
                for item in r.items
                if item.new.message_id is not None
            )
        )
        if not id_keys:
            return {}
        row_keys = await get_all(self._db, id_keys)
        found = [
            (id_key, row_key)
            for id_key, row_key in zip(id_keys, row_keys, strict=True)
            if row_key is not None
        ]
        values = await get_all(self._db, [row_key for _, row_key in found])
        stored: dict[bytes, Message] = {}
        for (id_key, row_key), value in zip(found, values, strict=True):
            if value is None:
                raise JournalUnavailable(f"journal at {self._url}: index {id_key!r} points to a missing row")
            stored[id_key] = keys.parse_row(self._url, row_key, value)
        return stored

    async def _next_offset(self, prefix: bytes) -> int:
        cached = self._next_offsets.get(prefix)
        if cached is not None:
            self._next_offsets.move_to_end(prefix)
            return cached
        iterator = await self._db.scan_prefix_with_options(prefix, ALL, LATEST_DESC)
        newest = await iterator.next()
        return 0 if newest is None else keys.offset_of(newest.key) + 1

    def _remember_offset(self, prefix: bytes, next_offset: int) -> None:
        self._next_offsets[prefix] = next_offset
        self._next_offsets.move_to_end(prefix)
        while len(self._next_offsets) > THREAD_CACHE_SIZE:
            self._next_offsets.popitem(last=False)

    def _invalidate(self) -> None:
        """After a failed group: forget the counters; they are re-derived from storage."""
        self._next_offsets.clear()
        self._recent.clear()
        self.windows.invalidate()
        self._alloc_seq = None
        self._uncertain = True

    async def _scan_last_seq(self, *, durable_only: bool) -> int:
        options = DURABLE_DESC if durable_only else LATEST_DESC
        iterator = await self._db.scan_prefix_with_options(keys.SEQ_PREFIX, ALL, options)
        newest = await iterator.next()
        return max(0 if newest is None else keys.seq_of(newest.key), await read_seq_floor(self._db))


def _existing(
    thread: ThreadRef, item: Item, in_group: dict[bytes, Message], stored: dict[bytes, Message]
) -> Message | None:
    """The message with this id earlier in this group or in storage; Conflict if it differs.

    A retry in the same thread learns which fields differ; an id taken in another thread gets
    the same answer whatever that message holds (no oracle on other threads' content).
    """
    if item.new.message_id is None:
        return None  # a fresh uuid4 cannot collide
    id_key = keys.message_id_key(thread.environment, thread.account_id, item.message_id)
    message = in_group.get(id_key)
    if message is None:
        message = stored.get(id_key)
    return None if message is None else check_retry(item.new, message, thread.thread_id)


def _count_written(written: list[tuple[Message, int]]) -> None:
    """The metrics of one durable write: its size, and its messages per account."""
    if not written:
        return
    JOURNAL_GROUP_MESSAGES.observe(len(written))
    first = written[0][0]
    if all(m.account_id == first.account_id and m.environment == first.environment for m, _ in written):
        child(MESSAGES_APPENDED, first.environment, first.account_id).inc(len(written))
        return
    counts: dict[tuple[str, str], int] = {}
    for message, _ in written:
        scope = (message.environment, message.account_id)
        counts[scope] = counts.get(scope, 0) + 1
    for (environment, account), n in counts.items():
        child(MESSAGES_APPENDED, environment, account).inc(n)


def _settle(future: asyncio.Future[Any], outcome: object) -> None:
    if future.done():
        return
    if isinstance(outcome, BaseException):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)
