"""`SlateJournal`: the durable journal on SlateDB (implements `core.stores.journal.Journal`).

Write path (group commit). `append` validates its messages and counts their tokens in the
caller's task, then queues them and waits. One writer task takes everything pending (up to
`MAX_GROUP_MESSAGES`), resolves message-id retries, allocates per-thread offsets and global seqs,
writes ONE atomic `WriteBatch` (message rows + seq index + message-id index), awaits its
durability, and only then resolves every caller. One group is in flight at a time, so seqs become
durable in order. After each group is durable, the append listeners run (`add_append_listener`:
the node wakes its relay this way instead of it polling). The in-memory counters (next offset
per thread, last seq) only advance after a group is durable; if a group fails, the counters are
dropped and re-derived from storage on next use (the failed batch may still be in SlateDB's
memtable, so offsets are never reused), and only that group's callers fail.

Reads (`last`, `after`, `read_from_seq`, cursors) only see durable data (`DurabilityLevel.REMOTE`),
so a reader never sees a message whose append has not been acknowledged and might still be lost.

This process must be the only writer. Opening the same journal elsewhere fences this instance:
SlateDB reports it on the next write or manifest poll (about 1 s), after which every call raises
`JournalFenced`. Other storage failures raise `JournalUnavailable`.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from typing import Any

from pydantic import ValidationError
from pydantic_core import PydanticSerializationError
from slatedb.uniffi import (
    CloseReason,
    Db,
    DbBuilder,
    DbIterator,
    DurabilityLevel,
    IterationOrder,
    KeyRange,
    KeyValue,
    ReadOptions,
    ScanOptions,
    Settings,
    WriteBatch,
)
from slatedb.uniffi import Error as SlateError

from core.config import S3Settings
from core.errors import Conflict, InvalidInput, JournalFenced, JournalUnavailable, MemstreamError
from core.journal.models import Message, NewMessage, ThreadRef
from core.journal.tokens import count_tokens, message_text_size, message_token_count
from sinks.slatedb import keys
from sinks.slatedb.objectstore import build_object_store

MAX_MESSAGES_PER_APPEND = 1000
MAX_GROUP_MESSAGES = 10_000
"""A writer group takes pending appends until it holds at least this many messages."""
OFFLOAD_TOKENIZE_CHARS = 256_000
"""Above this many characters in one append, token counting runs in a worker thread."""
THREAD_CACHE_SIZE = 100_000
"""Next-offset entries kept in memory (LRU); an evicted thread is re-derived with one scan."""
STATUS_POLL_INTERVAL_S = 0.02
"""How often calls ask SlateDB whether this writer was fenced or closed."""

log = logging.getLogger("memstream.journal")

_ALL = KeyRange(start=None, start_inclusive=False, end=None, end_inclusive=False)
_READ = ReadOptions(durability_filter=DurabilityLevel.REMOTE, dirty=False, cache_blocks=True)


def _scan_options(durable_only: bool, descending: bool = False) -> ScanOptions:
    return ScanOptions(
        durability_filter=DurabilityLevel.REMOTE if durable_only else DurabilityLevel.MEMORY,
        dirty=False,
        read_ahead_bytes=1,
        cache_blocks=True,
        max_fetch_tasks=1,
        order=IterationOrder.DESCENDING if descending else IterationOrder.ASCENDING,
    )


_DURABLE_ASC = _scan_options(True)
_DURABLE_DESC = _scan_options(True, descending=True)
_LATEST_DESC = _scan_options(False, descending=True)


@dataclass(frozen=True)
class JournalStats:
    """Counters since open: `batches` < `appends` shows that group commit batches."""

    appends: int = 0
    messages: int = 0
    batches: int = 0


@dataclass
class _Item:
    new: NewMessage
    message_id: str
    token_count: int


@dataclass
class _Request:
    thread: ThreadRef
    agent_id: str
    user_id: str | None
    items: list[_Item]
    future: asyncio.Future[list[Message]]


@dataclass
class _Plan:
    """What one group writes, and what each of its requests gets once that is durable."""

    rows: list[tuple[bytes, bytes]] = field(default_factory=list)
    outcomes: list[tuple[_Request, list[Message] | MemstreamError]] = field(default_factory=list)
    next_offsets: dict[bytes, int] = field(default_factory=dict)
    last_seq: int = 0
    new_messages: int = 0


class SlateJournal:
    """The journal on SlateDB. Create it with `await SlateJournal.open(url)`; see the module doc.

    An instance belongs to the event loop that opened it (it is not thread-safe). A caller that
    is cancelled while its append is being committed may still have its messages written; a
    retry with the same message_ids then returns them.
    """

    def __init__(self, db: Db, url: str, *, max_message_bytes: int, write_timeout_s: float) -> None:
        self._db = db
        self._url = url
        self._max_message_bytes = max_message_bytes
        self._write_timeout_s = write_timeout_s
        self._next_offsets: OrderedDict[bytes, int] = OrderedDict()
        self._alloc_seq: int | None = None  # last seq allocated and durable; None: re-derive
        self._durable_seq = 0
        self._uncertain = False  # a failed batch may linger in the memtable
        self._pending: list[_Request] = []
        self._wake = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None
        self._fenced = False
        self._db_closed: CloseReason | None = None
        self._status_polled_at = float("-inf")
        self._closing = False
        self._closed = False
        self._appends = 0
        self._messages = 0
        self._batches = 0
        self._append_listeners: list[Callable[[], None]] = []

    # ---- lifecycle -----------------------------------------------------------------------------

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        s3: S3Settings | None = None,
        flush_interval_ms: int = 2,
        max_message_bytes: int = 1_000_000,
        write_timeout_s: float = 30.0,
    ) -> SlateJournal:
        """Open (or create) the journal at `url` (`file:///abs/dir` or `s3://bucket/prefix`).

        Opening fences any other writer of the same journal. `flush_interval_ms` is SlateDB's WAL
        flush interval: the floor of a lone append's latency. `write_timeout_s` bounds the wait
        for durability of one group (JournalUnavailable when exceeded).
        """
        if flush_interval_ms < 1:
            raise ValueError("flush_interval_ms must be >= 1")
        if max_message_bytes < 1:
            raise ValueError("max_message_bytes must be >= 1")
        _speed_up_binding_byte_copy()
        location = build_object_store(url, s3)
        settings = Settings.default()
        settings.set("flush_interval", json.dumps(f"{flush_interval_ms}ms"))
        builder = DbBuilder(location.db_path, location.store)
        builder.with_settings(settings)
        try:
            db = await builder.build()
        except SlateError as exc:
            raise JournalUnavailable(f"cannot open the journal at {url}: {exc}") from exc
        journal = cls(db, url, max_message_bytes=max_message_bytes, write_timeout_s=write_timeout_s)
        try:
            with journal._storage_errors("recovering the last seq"):
                journal._durable_seq, _ = await asyncio.gather(
                    journal._scan_last_seq(durable_only=True),
                    asyncio.to_thread(count_tokens, "load the tokenizer now, not in the first append"),
                )
        except BaseException:
            await journal.close()
            raise
        journal._alloc_seq = journal._durable_seq
        return journal

    async def close(self) -> None:
        """Finish queued appends, then shut SlateDB down. Idempotent; quiet on a fenced journal."""
        if self._closed:
            return
        self._closing = True
        self._wake.set()
        if self._writer is not None:
            await asyncio.gather(self._writer, return_exceptions=True)
        self._closed = True
        self._fail_pending(JournalUnavailable(f"the journal at {self._url} was closed"))
        try:
            await self._db.shutdown()
        except SlateError as exc:
            if not self._fenced and not _is_fenced(exc):
                raise JournalUnavailable(f"closing the journal at {self._url} failed: {exc}") from exc

    @property
    def url(self) -> str:
        return self._url

    @property
    def stats(self) -> JournalStats:
        return JournalStats(appends=self._appends, messages=self._messages, batches=self._batches)

    def add_append_listener(self, listener: Callable[[], None]) -> None:
        """Call `listener()` in the writer task after every group commit that succeeded (its
        messages are durable and its callers are being answered). It must be quick and not block;
        an exception it raises is logged and does not affect the append."""
        self._append_listeners.append(listener)

    # ---- append --------------------------------------------------------------------------------

    async def append(
        self, thread: ThreadRef, agent_id: str, user_id: str | None, messages: Sequence[NewMessage]
    ) -> list[Message]:
        """Append durably (see `core.stores.journal`): returns when the messages are durable.

        Raises InvalidInput (nothing written), Conflict (a message_id reused with other content;
        nothing of this call written), JournalFenced, JournalUnavailable.
        """
        self._check_usable()
        items = await self._validate(thread, agent_id, user_id, messages)
        if not items:
            return []
        if self._fenced or self._closing:  # changed while validating
            raise self._stopped_error()
        future: asyncio.Future[list[Message]] = asyncio.get_running_loop().create_future()
        self._pending.append(_Request(thread, agent_id, user_id, items, future))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._run_writer(), name=f"journal-writer {self._url}")
        self._wake.set()
        return await future

    async def _validate(
        self, thread: ThreadRef, agent_id: str, user_id: str | None, messages: Sequence[NewMessage]
    ) -> list[_Item]:
        keys.check_thread(thread)
        keys.check_key_part(agent_id, "agent_id")
        if user_id is not None:
            keys.check_key_part(user_id, "user_id")
        if len(messages) > MAX_MESSAGES_PER_APPEND:
            raise InvalidInput(
                f"at most {MAX_MESSAGES_PER_APPEND} messages per append, got {len(messages)}",
                field="messages",
            )
        seen: set[str] = set()
        for i, message in enumerate(messages):
            if not isinstance(message, NewMessage):
                raise InvalidInput(f"messages[{i}] is not a NewMessage", field=f"messages[{i}]")
            if message.message_id is not None:
                if message.message_id in seen:
                    raise InvalidInput(
                        f"message_id {message.message_id!r} appears more than once in this append",
                        field=f"messages[{i}].message_id",
                    )
                seen.add(message.message_id)
            try:
                size = len(message.model_dump_json().encode("utf-8"))
            except PydanticSerializationError:
                raise InvalidInput(
                    f"messages[{i}] contains text that is not valid Unicode (a lone surrogate)",
                    field=f"messages[{i}]",
                ) from None
            if size > self._max_message_bytes:
                raise InvalidInput(
                    f"messages[{i}] is {size} bytes encoded; the limit is {self._max_message_bytes} bytes",
                    field=f"messages[{i}]",
                )
        if sum(message_text_size(m) for m in messages) > OFFLOAD_TOKENIZE_CHARS:
            counts = await asyncio.to_thread(lambda: [message_token_count(m) for m in messages])
        else:
            counts = [message_token_count(m) for m in messages]
        return [
            _Item(new=m, message_id=m.message_id or uuid.uuid4().hex, token_count=count)
            for m, count in zip(messages, counts, strict=True)
        ]

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
                group = self._take_group()
                try:
                    await self._commit(group)
                except Exception as exc:  # a bug: fail this group, keep serving
                    self._invalidate()
                    for request in group:
                        _settle(request.future, exc)
        finally:
            self._fail_pending(self._stopped_error())

    def _take_group(self) -> list[_Request]:
        """Everything pending, up to MAX_GROUP_MESSAGES (always at least one request)."""
        count = size = 0
        for request in self._pending:
            if size >= MAX_GROUP_MESSAGES:
                break
            size += len(request.items)
            count += 1
        group = self._pending[:count]
        del self._pending[:count]
        return [r for r in group if not r.future.done()]  # drop callers that were cancelled

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
                    await asyncio.wait_for(handle.await_durable(), self._write_timeout_s)
            elif self._uncertain:  # retries answered from a batch that failed: make it durable
                with self._storage_errors("flushing"):
                    await asyncio.wait_for(self._db.flush(), self._write_timeout_s)
        except MemstreamError as exc:
            self._invalidate()
            for request in group:
                _settle(request.future, exc)
            if self._fenced:
                self._fail_pending(self._fenced_error())
            return
        self._uncertain = False
        for prefix, next_offset in plan.next_offsets.items():
            self._remember_offset(prefix, next_offset)
        self._alloc_seq = plan.last_seq
        self._durable_seq = max(self._durable_seq, plan.last_seq)
        self._appends += len(group)
        self._messages += plan.new_messages
        for request, outcome in plan.outcomes:
            _settle(request.future, outcome)
        for listener in self._append_listeners:
            try:
                listener()
            except Exception:
                log.exception("journal append listener %r failed", listener)

    async def _plan(self, group: list[_Request]) -> _Plan:
        """Resolve retries and allocate offsets/seqs for a group; writes nothing."""
        if self._alloc_seq is None:
            self._alloc_seq = await self._scan_last_seq(durable_only=False)
        plan = _Plan(last_seq=self._alloc_seq)
        in_group: dict[bytes, Message] = {}
        now = datetime.now(UTC)
        for request in group:
            thread = request.thread
            try:
                existing = [await self._existing(thread, item, in_group) for item in request.items]
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
                    created_at=now,
                    token_count=item.token_count,
                )
                row_key = prefix + keys.offset_suffix(offset)
                id_key = keys.message_id_key(thread.environment, thread.account_id, item.message_id)
                plan.rows.append((row_key, message.model_dump_json().encode("utf-8")))
                plan.rows.append((keys.seq_key(plan.last_seq), row_key))
                plan.rows.append((id_key, row_key))
                in_group[id_key] = message
                result.append(message)
                offset += 1
                plan.new_messages += 1
            plan.next_offsets[prefix] = offset
            plan.outcomes.append((request, result))
        return plan

    async def _existing(
        self, thread: ThreadRef, item: _Item, in_group: dict[bytes, Message]
    ) -> Message | None:
        """The stored (or earlier in this group) message with this id; Conflict if it differs.

        A retry in the same thread learns which fields differ; an id taken in another thread
        gets the same answer whatever that message holds (no oracle on other threads' content).
        """
        if item.new.message_id is None:
            return None  # a fresh uuid4 cannot collide
        id_key = keys.message_id_key(thread.environment, thread.account_id, item.message_id)
        stored = in_group.get(id_key)
        if stored is None:
            row_key = await self._db.get(id_key)
            if row_key is None:
                return None
            value = await self._db.get(row_key)
            if value is None:
                raise JournalUnavailable(f"journal at {self._url}: index {id_key!r} points to a missing row")
            stored = self._parse(row_key, value)
        if stored.thread_id != thread.thread_id:
            # Another thread's message (maybe another agent's or user's): say nothing about it
            # beyond the unavoidable (the id is taken), so that a conflict cannot confirm its text.
            raise Conflict(
                f"message_id {item.message_id!r} is already used by a message of another thread in "
                "this account (message ids are unique per account); use a new message_id"
            )
        differing = [
            name
            for name, ours, theirs in (
                ("role", item.new.role, stored.role),
                ("content", item.new.content, stored.content),
                ("reasoning", item.new.reasoning, stored.reasoning),
                ("tool_call", item.new.tool_call, stored.tool_call),
            )
            if ours != theirs
        ]
        if differing:
            raise Conflict(
                f"message_id {item.message_id!r} already exists in this thread with a different "
                f"{', '.join(differing)}; use a new message_id for a new message"
            )
        return stored

    async def _next_offset(self, prefix: bytes) -> int:
        cached = self._next_offsets.get(prefix)
        if cached is not None:
            self._next_offsets.move_to_end(prefix)
            return cached
        iterator = await self._db.scan_prefix_with_options(prefix, _ALL, _LATEST_DESC)
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
        self._alloc_seq = None
        self._uncertain = True

    async def _scan_last_seq(self, *, durable_only: bool) -> int:
        options = _DURABLE_DESC if durable_only else _LATEST_DESC
        iterator = await self._db.scan_prefix_with_options(keys.SEQ_PREFIX, _ALL, options)
        newest = await iterator.next()
        return 0 if newest is None else keys.seq_of(newest.key)

    # ---- reads ---------------------------------------------------------------------------------

    async def last(self, thread: ThreadRef, n: int) -> list[Message]:
        """The last `n` durable messages of a thread, oldest first ([] for n == 0 or no thread)."""
        self._check_usable()
        keys.check_thread(thread)
        _check_count(n, "n")
        if n == 0:
            return []
        prefix = keys.thread_prefix(thread)
        with self._storage_errors("reading a thread"):
            iterator = await self._db.scan_prefix_with_options(prefix, _ALL, _DURABLE_DESC)
            rows = await _take(iterator, n)
        return [self._parse(row.key, row.value) for row in reversed(rows)]

    async def after(self, thread: ThreadRef, offset: int, limit: int = 1000) -> list[Message]:
        """Durable messages with offset > `offset` (-1 for the start), oldest first, at most `limit`."""
        self._check_usable()
        keys.check_thread(thread)
        _check_count(limit, "limit")
        if isinstance(offset, bool) or not isinstance(offset, int) or not -1 <= offset <= keys.MAX_NUMBER:
            raise InvalidInput(f"offset must be an integer from -1 to {keys.MAX_NUMBER}", field="offset")
        if limit == 0:
            return []
        start = None if offset < 0 else keys.offset_suffix(offset)
        subrange = KeyRange(start=start, start_inclusive=False, end=None, end_inclusive=False)
        with self._storage_errors("reading a thread"):
            iterator = await self._db.scan_prefix_with_options(
                keys.thread_prefix(thread), subrange, _DURABLE_ASC
            )
            rows = await _take(iterator, limit)
        return [self._parse(row.key, row.value) for row in rows]

    async def read_from_seq(self, after_seq: int, limit: int) -> list[Message]:
        """Durable messages with seq > `after_seq`, in seq order, at most `limit` (relay read)."""
        self._check_usable()
        _check_count(after_seq, "after_seq")
        _check_count(limit, "limit")
        if limit == 0:
            return []
        subrange = KeyRange(
            start=keys.seq_suffix(after_seq), start_inclusive=False, end=None, end_inclusive=False
        )
        with self._storage_errors("reading by seq"):
            iterator = await self._db.scan_prefix_with_options(keys.SEQ_PREFIX, subrange, _DURABLE_ASC)
            pointers = await _take(iterator, limit)
            values = await asyncio.gather(*(self._db.get_with_options(p.value, _READ) for p in pointers))
        messages: list[Message] = []
        for pointer, value in zip(pointers, values, strict=True):
            if value is None:
                raise JournalUnavailable(
                    f"journal at {self._url}: seq index {pointer.key!r} points to a missing row"
                )
            messages.append(self._parse(pointer.value, value))
        return messages

    async def last_seq(self) -> int:
        """The highest durable seq (0 when empty)."""
        self._check_usable()
        return self._durable_seq

    # ---- cursors -------------------------------------------------------------------------------

    async def get_cursor(self, name: str) -> int:
        """A named durable cursor; 0 when never set."""
        self._check_usable()
        key = keys.cursor_key(name)
        with self._storage_errors("reading a cursor"):
            value = await self._db.get_with_options(key, _READ)
        return 0 if value is None else int(value)

    async def set_cursor(self, name: str, seq: int) -> None:
        """Store a named cursor; returns when durable."""
        self._check_usable()
        key = keys.cursor_key(name)
        _check_count(seq, "seq")
        with self._storage_errors("writing a cursor"):
            handle = await self._db.put(key, str(seq).encode("ascii"))
            await asyncio.wait_for(handle.await_durable(), self._write_timeout_s)

    # ---- errors --------------------------------------------------------------------------------

    def _fenced_error(self) -> JournalFenced:
        return JournalFenced(
            f"journal at {self._url} was opened by another writer; this writer is fenced — stop it"
        )

    def _stopped_error(self) -> MemstreamError:
        if self._fenced:
            return self._fenced_error()
        return JournalUnavailable(f"the journal at {self._url} was closed")

    def _check_usable(self) -> None:
        """Raise at once on a fenced or closed journal (SlateDB's status says when it was fenced).

        The status is polled at most every STATUS_POLL_INTERVAL_S: SlateDB itself only learns of
        a fence on a write or a manifest poll, so polling more often would find nothing new.
        """
        if self._fenced:
            raise self._fenced_error()
        if self._closed or self._closing:
            raise JournalUnavailable(f"the journal at {self._url} is closed")
        now = time.monotonic()
        if self._db_closed is None and now - self._status_polled_at >= STATUS_POLL_INTERVAL_S:
            self._status_polled_at = now
            self._db_closed = self._db.status().close_reason
        if self._db_closed == CloseReason.FENCED:
            self._mark_fenced()
            raise self._fenced_error()
        if self._db_closed is not None:
            raise JournalUnavailable(
                f"the journal at {self._url} was closed by SlateDB ({self._db_closed.name})"
            )

    def _mark_fenced(self) -> None:
        self._fenced = True
        self._fail_pending(self._fenced_error())
        self._wake.set()

    def _fail_pending(self, error: MemstreamError) -> None:
        pending, self._pending = self._pending, []
        for request in pending:
            _settle(request.future, error)

    @contextlib.contextmanager
    def _storage_errors(self, action: str) -> Iterator[None]:
        """Translate SlateDB failures into JournalFenced / JournalUnavailable."""
        try:
            yield
        except SlateError as exc:
            if _is_fenced(exc):
                self._mark_fenced()
                raise self._fenced_error() from exc
            raise JournalUnavailable(f"journal at {self._url}: storage error while {action}: {exc}") from exc
        except TimeoutError as exc:
            raise JournalUnavailable(
                f"journal at {self._url}: {action} did not complete within {self._write_timeout_s} s"
            ) from exc

    def _parse(self, key: bytes, value: bytes) -> Message:
        try:
            return Message.model_validate_json(value)
        except ValidationError as exc:
            raise JournalUnavailable(f"journal at {self._url}: unreadable row {key!r}: {exc}") from exc


def _is_fenced(exc: BaseException) -> bool:
    return isinstance(exc, SlateError.Closed) and exc.reason == CloseReason.FENCED


def _settle(future: asyncio.Future[list[Message]], outcome: list[Message] | BaseException) -> None:
    if future.done():
        return
    if isinstance(outcome, BaseException):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)


def _check_count(value: int, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= keys.MAX_NUMBER:
        raise InvalidInput(f"{name} must be an integer from 0 to {keys.MAX_NUMBER}", field=name)


async def _take(iterator: DbIterator, limit: int) -> list[KeyValue]:
    rows: list[KeyValue] = []
    while len(rows) < limit:
        batch = await iterator.next_batch(min(limit - len(rows), 1000))
        if not batch:
            break
        rows.extend(batch)
    return rows


# ---- binding speed-up --------------------------------------------------------------------------

_PATCHED_VERSIONS: tuple[str, ...] = ("0.17.0",)


_FAST_WRITE_MARKER = "_memstream_fast_write"


def _fast_write(self: Any, value: bytes) -> None:
    """`_UniffiRustBufferBuilder.write` with one memmove instead of a Python loop per byte."""
    size = len(value)
    with self._reserve(size):
        if size:
            address = ctypes.addressof(self.rbuf.data.contents) + self.rbuf.len
            ctypes.memmove(address, bytes(value), size)


def _speed_up_binding_byte_copy() -> None:
    """Replace the generated binding's byte-by-byte copy into Rust buffers with one memmove.

    The UniFFI-generated `slatedb` binding copies every key/value into Rust one byte at a time
    in Python (~0.2 us/byte: 130 us for a 500-byte put, 8 ms for 50 KB). The replacement does
    exactly the same copy with `ctypes.memmove`. It is applied only to the binding versions it
    was checked against, once, and is covered by the round-trip tests.
    """
    try:
        if metadata.version("slatedb") not in _PATCHED_VERSIONS:
            return
        from slatedb.uniffi._slatedb_uniffi import slatedb as generated
    except (ImportError, metadata.PackageNotFoundError):
        return
    builder: Any = getattr(generated, "_UniffiRustBufferBuilder", None)
    if builder is None or not hasattr(builder, "_reserve") or getattr(builder, _FAST_WRITE_MARKER, False):
        return
    builder.write = _fast_write
    setattr(builder, _FAST_WRITE_MARKER, True)
