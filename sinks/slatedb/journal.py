"""`SlateJournal`: the durable journal on SlateDB (implements `core.stores.journal.Journal`).

Write path (group commit, `sinks.slatedb.group_commit`). `append` validates its messages and
counts their tokens in the caller's task, then queues them and waits; one writer task writes
everything pending as ONE atomic `WriteBatch`, awaits its durability, and only then resolves every
caller, so seqs become durable in order. After each group is durable, the append listeners run
(`add_append_listener`: the node wakes its relay this way instead of it polling).

Reads (`last`, `after`, `read_from_seq`, cursors) only see durable data (`DurabilityLevel.REMOTE`),
so a reader never sees a message whose append has not been acknowledged and might still be lost.
`read_from_seq` answers the relay's reads of the last appends from the messages the writer keeps
once durable (`sinks.slatedb.recent`), and `last` (up to a context window) the windows of recently
read threads (`sinks.slatedb.windows`), exactly what storage holds.

This process must be the only writer. Opening the same journal elsewhere fences this instance:
SlateDB reports it on the next write or manifest poll (about 1 s), after which every call raises
`JournalFenced`. Other storage failures raise `JournalUnavailable`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import Callable, Iterator, Sequence

from slatedb.uniffi import CloseReason, Db, DbBuilder, KeyValue, Settings
from slatedb.uniffi import Error as SlateError

from core.config import S3Settings
from core.errors import JournalFenced, JournalUnavailable, MemstreamError
from core.journal.append_rules import check_messages
from core.journal.models import Message, NewMessage, ThreadRef
from core.journal.tokens import count_tokens, message_text_size, message_token_count
from core.sharding.shards import MAX_SHARDS, check_shard
from core.stores.deletions import JournalDeletion
from sinks.slatedb import keys
from sinks.slatedb.binding import READ, is_fenced, speed_up_byte_copy
from sinks.slatedb.group_commit import GroupCommit, Item, JournalStats
from sinks.slatedb.layout import check_layout, record_layout
from sinks.slatedb.objectstore import build_object_store
from sinks.slatedb.scans import check_count, check_offset, last_rows, messages_after, messages_from_seq

OFFLOAD_TOKENIZE_CHARS = 256_000
"""Above this many characters in one append, token counting runs in a worker thread."""
STATUS_POLL_INTERVAL_S = 0.02
"""How often calls ask SlateDB whether this writer was fenced or closed."""


class SlateJournal:
    """The journal on SlateDB. Create it with `await SlateJournal.open(url)`; see the module doc.

    An instance belongs to the event loop that opened it (it is not thread-safe). A caller that
    is cancelled while its append is being committed may still have its messages written; a
    retry with the same message_ids then returns them.
    """

    def __init__(
        self, db: Db, url: str, *, max_message_bytes: int, write_timeout_s: float, shard: int = 0
    ) -> None:
        self._db = db
        self._url = url
        self._shard = shard
        self._max_message_bytes = max_message_bytes
        self._commits = GroupCommit(
            db,
            url,
            write_timeout_s=write_timeout_s,
            storage_errors=self._storage_errors,
            fenced_error=self._fenced_error,
            shard=shard,
        )
        self._unrecorded_shards: int | None = None  # the shard count to record (`record_layout`)
        self._fenced = False
        self._db_closed: CloseReason | None = None
        self._status_polled_at = float("-inf")
        self._closing = False
        self._closed = False

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
        shard: int = 0,
        shards: int | None = None,
        record: bool = True,
    ) -> SlateJournal:
        """Open (or create) the journal at `url` (`file:///abs/dir` or `s3://bucket/prefix`).

        Opening fences any other writer of the same journal. `flush_interval_ms` is SlateDB's WAL
        flush interval: the floor of a lone append's latency. `write_timeout_s` bounds the wait
        for durability of one group (JournalUnavailable when exceeded). The journal is shard
        `shard` (its messages carry it: `Message.shard`); with `shards`, the journal must be that
        shard of that count (`sinks.slatedb.layout`: JournalShardsMismatch otherwise, the writer
        closed again), recorded in it on first open unless `record` is False (then
        `record_layout()` does it).
        """
        if flush_interval_ms < 1:
            raise ValueError("flush_interval_ms must be >= 1")
        if max_message_bytes < 1:
            raise ValueError("max_message_bytes must be >= 1")
        check_shard(shard, shards if shards is not None else MAX_SHARDS)
        speed_up_byte_copy()
        location = build_object_store(url, s3)
        settings = Settings.default()
        settings.set("flush_interval", json.dumps(f"{flush_interval_ms}ms"))
        builder = DbBuilder(location.db_path, location.store)
        builder.with_settings(settings)
        try:
            db = await builder.build()
        except SlateError as exc:
            raise JournalUnavailable(f"cannot open the journal at {url}: {exc}") from exc
        journal = cls(
            db, url, max_message_bytes=max_message_bytes, write_timeout_s=write_timeout_s, shard=shard
        )
        try:
            if shards is not None:
                with journal._storage_errors("checking which shard it is"):
                    if await check_layout(db, url, shard, shards):
                        journal._unrecorded_shards = shards
                if record:
                    await journal.record_layout()
            with journal._storage_errors("recovering the last seq"):
                await asyncio.gather(
                    journal._commits.recover(),
                    asyncio.to_thread(count_tokens, "load the tokenizer now, not in the first append"),
                )
        except BaseException:
            await journal.close()
            raise
        return journal

    async def close(self) -> None:
        """Finish queued appends, then shut SlateDB down. Idempotent; quiet on a fenced journal."""
        if self._closed:
            return
        self._closing = True
        await self._commits.close()
        self._commits.windows.invalidate()
        self._closed = True
        try:
            await self._db.shutdown()
        except SlateError as exc:
            if not self._fenced and not is_fenced(exc):
                raise JournalUnavailable(f"closing the journal at {self._url} failed: {exc}") from exc

    @property
    def url(self) -> str:
        return self._url

    @property
    def shard(self) -> int:
        """The journal shard this is (`core.sharding.shards`; 0 with one shard)."""
        return self._shard

    async def record_layout(self) -> None:
        """Record the layout `open` checked, when the journal has no record yet (durable on return;
        nothing to do otherwise)."""
        shards, self._unrecorded_shards = self._unrecorded_shards, None
        if shards is None:
            return
        self._check_usable()
        with self._storage_errors("recording which shard it is"):
            await record_layout(self._db, self._shard, shards, self._commits.write_timeout_s)

    @property
    def stats(self) -> JournalStats:
        return self._commits.stats

    def add_append_listener(self, listener: Callable[[], None]) -> None:
        """Call `listener()` in the writer task after every group commit that succeeded (its
        messages are durable and its callers are being answered). It must be quick and not block;
        an exception it raises is logged (logger `memstream.journal`) and does not affect the append."""
        self._commits.add_listener(listener)

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
        return await self._commits.submit(thread, agent_id, user_id, items)

    async def _validate(
        self, thread: ThreadRef, agent_id: str, user_id: str | None, messages: Sequence[NewMessage]
    ) -> list[Item]:
        keys.check_thread(thread)
        keys.check_key_part(agent_id, "agent_id")
        if user_id is not None:
            keys.check_key_part(user_id, "user_id")
        check_messages(messages, self._max_message_bytes)
        if sum(message_text_size(m) for m in messages) > OFFLOAD_TOKENIZE_CHARS:
            counts = await asyncio.to_thread(lambda: [message_token_count(m) for m in messages])
        else:
            counts = [message_token_count(m) for m in messages]
        return [
            Item(new=m, message_id=m.message_id or uuid.uuid4().hex, token_count=count)
            for m, count in zip(messages, counts, strict=True)
        ]

    # ---- reads ---------------------------------------------------------------------------------

    async def last(self, thread: ThreadRef, n: int) -> list[Message]:
        """The last `n` durable messages of a thread, oldest first ([] for n == 0 or no thread).

        Up to the context window's size, answered from the windows the writer keeps of recently
        read threads (`sinks.slatedb.windows`); a miss reads a whole window and keeps it."""
        self._check_usable()
        keys.check_thread(thread)
        check_count(n, "n")
        if n == 0:
            return []
        windows = self._commits.windows
        if n > windows.window:
            rows = await self._scan_last(thread, n)
            return [keys.parse_row(self._url, row.key, row.value) for row in reversed(rows)]
        key = (thread.environment, thread.account_id, thread.thread_id)
        kept = windows.get(key, n)
        if kept is not None:
            return kept
        ticket = windows.ticket()
        rows = await self._scan_last(thread, windows.window)
        read = [(keys.parse_row(self._url, row.key, row.value), len(row.value)) for row in reversed(rows)]
        windows.put(key, ticket, read)  # no await since the scan: see the module doc of windows
        return [message for message, _ in read[-n:]]

    async def _scan_last(self, thread: ThreadRef, n: int) -> list[KeyValue]:
        """The last `n` durable rows of a thread, newest first."""
        with self._storage_errors("reading a thread"):
            return await last_rows(self._db, thread, n)

    async def after(self, thread: ThreadRef, offset: int, limit: int = 1000) -> list[Message]:
        """Durable messages with offset > `offset` (-1 for the start), oldest first, at most `limit`."""
        self._check_usable()
        keys.check_thread(thread)
        check_count(limit, "limit")
        check_offset(offset)
        with self._storage_errors("reading a thread"):
            return await messages_after(self._db, self._url, thread, offset, limit)

    async def read_from_seq(self, after_seq: int, limit: int) -> list[Message]:
        """Durable messages with seq > `after_seq`, in seq order, at most `limit` (relay read)."""
        self._check_usable()
        check_count(after_seq, "after_seq")
        check_count(limit, "limit")
        if limit == 0:
            return []
        recent = self._commits.read_recent(after_seq, limit)
        if recent is not None:
            return recent
        with self._storage_errors("reading by seq"):
            return await messages_from_seq(self._db, self._url, after_seq, limit)

    async def last_seq(self) -> int:
        """The highest durable seq (0 when empty)."""
        self._check_usable()
        return self._commits.durable_seq

    async def ready(self) -> None:
        """Return when the journal takes calls; JournalFenced or JournalUnavailable otherwise (no I/O)."""
        self._check_usable()

    # ---- deletion ------------------------------------------------------------------------------

    async def delete_thread(self, thread: ThreadRef) -> JournalDeletion:
        """Delete every row of `thread` (and its seq and message-id index entries) durably; see
        `core.stores.journal`. Idempotent: a thread without rows deletes nothing."""
        self._check_usable()
        keys.check_thread(thread)
        return await self._commits.delete_thread(thread)

    # ---- cursors -------------------------------------------------------------------------------

    async def get_cursor(self, name: str) -> int:
        """A named durable cursor; 0 when never set."""
        self._check_usable()
        key = keys.cursor_key(name)
        with self._storage_errors("reading a cursor"):
            value = await self._db.get_with_options(key, READ)
        return 0 if value is None else int(value)

    async def set_cursor(self, name: str, seq: int) -> None:
        """Store a named cursor; returns when durable."""
        self._check_usable()
        key = keys.cursor_key(name)
        check_count(seq, "seq")
        with self._storage_errors("writing a cursor"):
            handle = await self._db.put(key, str(seq).encode("ascii"))
            await asyncio.wait_for(handle.await_durable(), self._commits.write_timeout_s)

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
        self._commits.fence()
        self._commits.windows.invalidate()

    @contextlib.contextmanager
    def _storage_errors(self, action: str) -> Iterator[None]:
        """Translate SlateDB failures into JournalFenced / JournalUnavailable."""
        try:
            yield
        except SlateError as exc:
            if is_fenced(exc):
                self._mark_fenced()
                raise self._fenced_error() from exc
            raise JournalUnavailable(f"journal at {self._url}: storage error while {action}: {exc}") from exc
        except TimeoutError as exc:
            raise JournalUnavailable(
                f"journal at {self._url}: {action} did not complete within {self._commits.write_timeout_s} s"
            ) from exc
