"""`SlateJournalReader`: a read-only view of a SlateDB journal that another process writes.

It implements the read half of `core.stores.journal.Journal` (`last`, `after`, `read_from_seq`,
`last_seq`, `get_cursor`); the writes (`append`, `set_cursor`, `add_append_listener`) raise
`JournalReadOnly`. It lets the thread-memory processors run outside the node, whose journal
writer must stay the only one: a SlateDB reader (`DbReader`, mode FOLLOW_LATEST) does not fence
the writer.

Visibility: the reader sees only durable writes, and it sees them after its next manifest poll
(`poll_interval_ms`, ~one interval later). A processor gets a record of (thread, offset) once the
append was durable, but this view may not show it yet. Per-thread offsets are dense, so a read can
tell that it is short: `wait_visible(thread, offset)` returns once the thread's message at `offset`
is visible here, polling for at most `visibility_timeout_s`, then raises `StoreUnavailable` (an
outage: the runtime retries the batch). `core.journal.reading.messages_between` calls it when a
range it was asked for comes back short (`core.journal.reading.Follower`).

Storage errors raise `JournalUnavailable`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator, Sequence

from slatedb.uniffi import DbReader, DbReaderBuilder, ReaderMode, ReaderOptions
from slatedb.uniffi import Error as SlateError

from core.config import S3Settings
from core.errors import (
    JournalReadOnly,
    JournalShardsMismatch,
    JournalUnavailable,
    StoreUnavailable,
    ThreadDeleted,
)
from core.journal.models import Message, NewMessage, ThreadRef
from core.stores.deletions import JournalDeletion
from sinks.slatedb import keys
from sinks.slatedb.binding import ALL, DURABLE_DESC, READ, speed_up_byte_copy, take
from sinks.slatedb.layout import recorded_layout
from sinks.slatedb.objectstore import build_object_store
from sinks.slatedb.scans import check_count, check_offset, last_rows, messages_after, messages_from_seq
from sinks.slatedb.thread_delete import read_seq_floor

DEFAULT_POLL_INTERVAL_MS = 100
"""How often the reader looks for new durable writes (SlateDB's default is 10 s)."""
DEFAULT_VISIBILITY_TIMEOUT_S = 10.0
"""How long `wait_visible` waits for a message the writer made durable before it gives up."""
CHECKPOINT_LIFETIME_MS = 600_000
MAX_MEMTABLE_BYTES = 64 << 20
"""SlateDB's reader defaults (a FOLLOW_LATEST reader creates no checkpoint)."""


NOT_CREATED = "failed to find latest transactional object"
"""What SlateDB's data error says when there is no manifest at the URL: no writer created it."""


class JournalNotFound(JournalUnavailable):
    """There is no journal at the URL (no writer opened it yet), as opposed to one that cannot be
    read right now."""


class SlateJournalReader:
    """A read-only view of the journal at a URL (module doc). Create it with
    `await SlateJournalReader.open(url)`; it belongs to the event loop that opened it."""

    def __init__(self, db: DbReader, url: str, *, poll_interval_ms: int, visibility_timeout_s: float) -> None:
        self._db = db
        self._url = url
        self._poll_interval_s = poll_interval_ms / 1000
        self._visibility_timeout_s = visibility_timeout_s
        self._closed = False

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        s3: S3Settings | None = None,
        poll_interval_ms: int = DEFAULT_POLL_INTERVAL_MS,
        visibility_timeout_s: float = DEFAULT_VISIBILITY_TIMEOUT_S,
        shard: int = 0,
        shards: int | None = None,
    ) -> SlateJournalReader:
        """Open a reader of the journal at `url` (`file:///abs/dir` or `s3://bucket/prefix`), which
        must exist (its writer created it): JournalNotFound (a JournalUnavailable) otherwise. With
        `shards`, a journal that records another layout than shard `shard` of `shards` is refused
        (JournalShardsMismatch, `sinks.slatedb.layout`)."""
        if poll_interval_ms < 1:
            raise ValueError("poll_interval_ms must be >= 1")
        if visibility_timeout_s <= 0:
            raise ValueError("visibility_timeout_s must be positive")
        speed_up_byte_copy()
        location = build_object_store(url, s3)
        builder = DbReaderBuilder(location.db_path, location.store)
        builder.with_options(
            ReaderOptions(
                manifest_poll_interval_ms=poll_interval_ms,
                checkpoint_lifetime_ms=CHECKPOINT_LIFETIME_MS,
                max_memtable_bytes=MAX_MEMTABLE_BYTES,
                skip_wal_replay=False,
            )
        )
        builder.with_reader_mode(ReaderMode.FOLLOW_LATEST())
        try:
            db = await builder.build()
        except SlateError as exc:
            if isinstance(exc, SlateError.Data) and NOT_CREATED in str(exc):
                raise JournalNotFound(f"there is no journal at {url} (no writer created it yet)") from exc
            raise JournalUnavailable(f"cannot open a reader of the journal at {url}: {exc}") from exc
        reader = cls(db, url, poll_interval_ms=poll_interval_ms, visibility_timeout_s=visibility_timeout_s)
        if shards is not None:
            try:
                with reader._storage_errors("checking which shard it is"):
                    recorded, _ = await recorded_layout(db, url)
                if recorded is not None and recorded != (shard, shards):
                    raise JournalShardsMismatch(
                        f"the journal at {url} is shard {recorded[0]} of {recorded[1]}, and this process "
                        f"expects shard {shard} of {shards}: give it the node's MEMSTREAM_JOURNAL_SHARDS "
                        "and MEMSTREAM_JOURNAL_URL"
                    )
            except BaseException:
                await reader.close()
                raise
        return reader

    async def close(self) -> None:
        """Shut the reader down. Idempotent."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(SlateError):
            await self._db.shutdown()

    @property
    def url(self) -> str:
        return self._url

    # ---- reads ---------------------------------------------------------------------------------

    async def last(self, thread: ThreadRef, n: int) -> list[Message]:
        """The last `n` messages of a thread visible here, oldest first ([] for n == 0 or none)."""
        self._check_open()
        keys.check_thread(thread)
        check_count(n, "n")
        if n == 0:
            return []
        with self._storage_errors("reading a thread"):
            rows = await last_rows(self._db, thread, n)
        return [keys.parse_row(self._url, row.key, row.value) for row in reversed(rows)]

    async def after(self, thread: ThreadRef, offset: int, limit: int = 1000) -> list[Message]:
        """Visible messages with offset > `offset` (-1 for the start), oldest first, at most `limit`."""
        self._check_open()
        keys.check_thread(thread)
        check_count(limit, "limit")
        check_offset(offset)
        with self._storage_errors("reading a thread"):
            return await messages_after(self._db, self._url, thread, offset, limit)

    async def read_from_seq(self, after_seq: int, limit: int) -> list[Message]:
        """Visible messages with seq > `after_seq`, in seq order, at most `limit`."""
        self._check_open()
        check_count(after_seq, "after_seq")
        check_count(limit, "limit")
        if limit == 0:
            return []
        with self._storage_errors("reading by seq"):
            return await messages_from_seq(self._db, self._url, after_seq, limit)

    async def last_seq(self) -> int:
        """The highest seq visible here (0 when none)."""
        self._check_open()
        with self._storage_errors("reading the last seq"):
            iterator = await self._db.scan_prefix_with_options(keys.SEQ_PREFIX, ALL, DURABLE_DESC)
            rows = await take(iterator, 1)
            floor = await read_seq_floor(self._db)
        return max(keys.seq_of(rows[0].key) if rows else 0, floor)

    async def ready(self) -> None:
        """Return while the reader is open; JournalUnavailable once closed (no I/O)."""
        self._check_open()

    async def get_cursor(self, name: str) -> int:
        """A named cursor as visible here; 0 when never set."""
        self._check_open()
        key = keys.cursor_key(name)
        with self._storage_errors("reading a cursor"):
            value = await self._db.get_with_options(key, READ)
        return 0 if value is None else int(value)

    async def wait_visible(self, thread: ThreadRef, offset: int) -> None:
        """Return once the thread's message at `offset` is visible here (its writer made it
        durable); StoreUnavailable after `visibility_timeout_s` (module doc), or ThreadDeleted then
        when the thread was deleted since (`DELETE /v1/threads/{id}`): a request for its messages
        is stale, waiting longer would not help."""
        deadline = time.monotonic() + self._visibility_timeout_s
        while True:
            last = await self.last(thread, 1)
            if last and last[-1].offset >= offset:
                return
            if time.monotonic() >= deadline:
                seen = last[-1].offset if last else None
                with self._storage_errors("reading a deletion marker"):
                    marker = await self._db.get_with_options(keys.deleted_key(thread), READ)
                if marker is not None:
                    raise ThreadDeleted(
                        f"journal at {self._url}: offset {offset} of thread {thread.thread_id} is not there: "
                        f"the thread was deleted (up to seq {int(marker)}; it sees up to offset {seen})"
                    )
                raise StoreUnavailable(
                    f"journal at {self._url}: offset {offset} of thread {thread.thread_id} is not "
                    f"visible to this reader after {self._visibility_timeout_s} s (it sees up to {seen})"
                )
            await asyncio.sleep(self._poll_interval_s / 2)

    # ---- writes: refused -----------------------------------------------------------------------

    async def append(
        self, thread: ThreadRef, agent_id: str, user_id: str | None, messages: Sequence[NewMessage]
    ) -> list[Message]:
        raise self._read_only("append")

    async def set_cursor(self, name: str, seq: int) -> None:
        raise self._read_only("set_cursor")

    async def delete_thread(self, thread: ThreadRef) -> JournalDeletion:
        raise self._read_only("delete_thread")

    def add_append_listener(self, listener: Callable[[], None]) -> None:
        raise self._read_only("add_append_listener")

    # ---- errors --------------------------------------------------------------------------------

    def _read_only(self, call: str) -> JournalReadOnly:
        return JournalReadOnly(
            f"journal at {self._url}: {call} on a read-only reader (the node's journal writes)"
        )

    def _check_open(self) -> None:
        if self._closed:
            raise JournalUnavailable(f"the journal reader of {self._url} is closed")

    @contextlib.contextmanager
    def _storage_errors(self, action: str) -> Iterator[None]:
        try:
            yield
        except SlateError as exc:
            raise JournalUnavailable(f"journal at {self._url}: storage error while {action}: {exc}") from exc
