"""`memstream verify`: per-thread message counts of the journal against the ClickHouse projection.

Runs in the node (it owns the journal and the chdb data path). Steps:
1. For each journal shard (`core.sharding.shards`: seqs count within a shard, and a thread lives in
   one; with shards across nodes, the ones other nodes write through read-only views:
   `memstream.sharding.shard_sources`), snapshot its relay's durable cursor C and its last seq L,
   then count every message of the node's environment with seq <= L per thread (`read_from_seq` in
   batches, with progress), remembering which seqs were not yet published (> C of the thread's
   shard).
2. Read the projection's counts (`TranscriptStore.thread_counts(environment)`).
3. Compare (`compare`, pure): per thread the projection must hold as many messages as the journal.
   A shortfall that is covered by messages the relay had not yet published is *pending*, not a
   defect (reported separately). A thread with more messages in the projection than the journal had
   at L is re-counted in the journal (appends after the snapshot), as is a thread only the
   projection has.
4. While defects or pending messages remain, wait up to `settle_s` (re-reading the relay cursor
   and the projection every `poll_s`): the projection processor may simply be behind.
5. With the deletion register: what completed thread deletions left behind in the journal, the
   projection or the message vectors (`vectors`), and the deletions not completed
   (`memstream.ops.verify_deletions`).
6. With the erasure stores: what completed user erasures left behind (threads, memory rows, the
   journal messages and projection rows of their deleted threads), and the erasures not completed
   (`memstream.ops.verify_erasures`).
`VerifyReport.ok` is True when no defect remains (pending messages alone are not a defect; a
deletion's or an erasure's leftover, or one not completed, is).

Threads whose account or thread id is no longer a valid id (accepted before ids were matched in
full, e.g. one ending in a line feed: `core.ids.check_stored_id`) are counted like any other
from the journal's seq order, but the journal can no longer be read per thread for them, and
nothing can be appended to them: their snapshot count is final and they are never re-counted.
The report lists them (`invalid_id_threads`, named with the invalid parts escaped) besides any
difference they show.
"""

from __future__ import annotations

import asyncio
import bisect
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from core.ids import ID, shown_id
from core.journal.models import ThreadRef
from core.sharding.journal import ShardedThreadJournal
from core.stores.deletions import DeletionRegister
from core.stores.message_vectors import MessageVectorStore
from core.stores.transcripts import ThreadCount, TranscriptStore
from memstream.ops.progress import Progress, ProgressCallback, no_progress
from memstream.ops.verify_deletions import DeletionLeftover, check_deletions
from memstream.ops.verify_erasures import ErasureLeftover, ErasureStores, check_erasures
from streams.journal_shards import ShardSource, ShardSources

ThreadKey = tuple[str, str]  # (account_id, thread_id)
DiffKind = Literal["missing_thread", "fewer", "more", "unknown_thread"]

INVALID_ID_NAMES = 100
"""At most this many threads with invalid ids are named in a report (all are counted)."""


@dataclass
class JournalThread:
    """One thread's journal side: messages counted, highest offset, seqs not yet published (of its
    journal `shard`)."""

    messages: int = 0
    max_offset: int = -1
    unpublished: list[int] = field(default_factory=list)  # sorted seqs > the relay cursor snapshot
    shard: int = 0

    def published(self, cursor: int) -> int:
        """Messages of this thread the relay had published when its cursor was `cursor`."""
        return self.messages - (len(self.unpublished) - bisect.bisect_right(self.unpublished, cursor))


@dataclass(frozen=True)
class ThreadDiff:
    account_id: str
    thread_id: str
    kind: DiffKind
    journal: int
    projection: int


@dataclass(frozen=True)
class Comparison:
    differences: tuple[ThreadDiff, ...]
    pending_threads: int
    pending_messages: int


@dataclass(frozen=True)
class VerifyReport:
    environment: str
    journal_threads: int
    journal_messages: int
    projection_threads: int
    projection_messages: int
    pending_threads: int  # threads whose only shortfall is messages the relay has not published yet
    pending_messages: int
    differences: tuple[ThreadDiff, ...]
    seconds: float
    invalid_id_count: int = 0
    """Threads (of the journal or the projection) whose ids are no longer valid (module doc)."""
    invalid_id_threads: tuple[str, ...] = ()
    """The first `INVALID_ID_NAMES` of them, as `account/thread` with invalid ids escaped."""
    incomplete_deletions: tuple[str, ...] = ()
    """Thread deletions not completed, as `deletion_id account/thread`."""
    deletion_leftovers: tuple[DeletionLeftover, ...] = ()
    """Messages or projection rows a completed thread deletion should have removed."""
    incomplete_erasures: tuple[str, ...] = ()
    """User erasures not completed, as `erasure_id account/user`."""
    erasure_leftovers: tuple[ErasureLeftover, ...] = ()
    """What a completed user erasure should have removed."""

    @property
    def ok(self) -> bool:
        return not (
            self.differences
            or self.incomplete_deletions
            or self.deletion_leftovers
            or self.incomplete_erasures
            or self.erasure_leftovers
        )


def valid_ids(key: ThreadKey) -> bool:
    """Whether both ids of a thread are valid ids today (module doc)."""
    return ID.matches(key[0]) and ID.matches(key[1])


def thread_name(account_id: str, thread_id: str) -> str:
    """`account/thread` for messages, an invalid id escaped and quoted (`acme/'t1\\n'`)."""
    return f"{shown_id(account_id)}/{shown_id(thread_id)}"


def compare(
    journal: Mapping[ThreadKey, JournalThread],
    projection: Mapping[ThreadKey, ThreadCount],
    cursors: Mapping[int, int],
) -> Comparison:
    """Defects and pending messages per thread (module doc, step 3), `cursors` the relay cursor of
    each shard. Pure."""
    diffs: list[ThreadDiff] = []
    pending_threads = pending_messages = 0
    for key in sorted(journal.keys() | projection.keys()):
        j = journal.get(key)
        p = projection.get(key)
        have = p.messages if p is not None else 0
        if j is None:
            diffs.append(ThreadDiff(key[0], key[1], "unknown_thread", 0, have))
            continue
        if have == j.messages:
            continue
        if have > j.messages:
            diffs.append(ThreadDiff(key[0], key[1], "more", j.messages, have))
        elif have >= j.published(cursors.get(j.shard, 0)):
            pending_threads += 1
            pending_messages += j.messages - have
        else:
            kind: DiffKind = "missing_thread" if p is None else "fewer"
            diffs.append(ThreadDiff(key[0], key[1], kind, j.messages, have))
    return Comparison(tuple(diffs), pending_threads, pending_messages)


async def count_journal(
    journal: ShardSource,
    environment: str,
    last_seq: int,
    cursor: int,
    *,
    batch: int = 2000,
    progress: ProgressCallback = no_progress,
    shard: int = 0,
    threads: dict[ThreadKey, JournalThread] | None = None,
) -> dict[ThreadKey, JournalThread]:
    """Per-thread counts of `environment`'s messages with seq <= `last_seq` of the journal of
    `shard` (module doc, step 1), added to `threads` when given."""
    threads = {} if threads is None else threads
    after = 0
    started = time.monotonic()
    while after < last_seq:
        messages = await journal.read_from_seq(after, min(batch, last_seq - after))
        if not messages:
            break
        for message in messages:
            if message.seq > last_seq:
                break
            if message.environment != environment:
                continue
            thread = threads.setdefault((message.account_id, message.thread_id), JournalThread(shard=shard))
            thread.messages += 1
            thread.max_offset = max(thread.max_offset, message.offset)
            if message.seq > cursor:
                thread.unpublished.append(message.seq)
        after = messages[-1].seq
        elapsed = time.monotonic() - started
        progress(
            Progress(
                "journal",
                min(after, last_seq),
                last_seq,
                f"{len(threads)} threads" + (f" (shard {shard})" if shard else ""),
                {"messages_per_s": round(after / elapsed) if elapsed else 0},
            )
        )
    return threads


async def _recount(
    journal: ShardedThreadJournal,
    environment: str,
    threads: dict[ThreadKey, JournalThread],
    projection: Mapping[ThreadKey, ThreadCount],
) -> None:
    """Add the journal's messages appended after the snapshot to threads the projection has more of
    (never to a thread with an invalid id: module doc)."""
    for key, count in projection.items():
        thread = threads.get(key)
        if thread is not None and count.messages <= thread.messages:
            continue
        if not valid_ids(key):
            continue
        ref = ThreadRef(environment=environment, account_id=key[0], thread_id=key[1])
        thread = thread or JournalThread(shard=journal.shard_of(ref))
        newer = await journal.after(ref, thread.max_offset, limit=100_000)
        if newer:
            threads[key] = thread
            thread.messages += len(newer)
            thread.max_offset = newer[-1].offset
            thread.unpublished.extend(m.seq for m in newer)
            thread.unpublished.sort()


async def verify(
    shards: ShardSources,
    journal: ShardedThreadJournal,
    store: TranscriptStore,
    environment: str,
    *,
    settle_s: float = 10.0,
    poll_s: float = 1.0,
    progress: ProgressCallback = no_progress,
    deletions: DeletionRegister | None = None,
    vectors: MessageVectorStore | None = None,
    erasures: ErasureStores | None = None,
) -> VerifyReport:
    """See the module doc: `shards` every journal shard (`ShardSource`), `journal` every thread's."""
    started = time.monotonic()
    threads: dict[ThreadKey, JournalThread] = {}
    for source in shards:
        cursor = await source.published()
        last = await source.last_seq()
        await count_journal(
            source, environment, last, cursor, progress=progress, shard=source.shard, threads=threads
        )
    deadline = time.monotonic() + settle_s
    while True:
        projection = {(c.account_id, c.thread_id): c for c in await store.thread_counts(environment)}
        progress(Progress("projection", len(projection), len(projection), f"{len(projection)} threads"))
        await _recount(journal, environment, threads, projection)
        result = compare(threads, projection, {source.shard: await source.published() for source in shards})
        settled = not result.differences and not result.pending_messages
        remaining = deadline - time.monotonic()
        if settled or remaining <= 0:
            break
        progress(
            Progress(
                "settle",
                round(settle_s - remaining),
                round(settle_s),
                f"{len(result.differences)} thread(s) differ, {result.pending_messages} message(s) not yet "
                "published: waiting for the relay and the projection to catch up",
            )
        )
        await asyncio.sleep(min(poll_s, remaining))
    invalid = sorted(key for key in threads.keys() | projection.keys() if not valid_ids(key))
    incomplete: list[str] = []
    leftovers: list[DeletionLeftover] = []
    if deletions is not None:
        progress(Progress("deletions", 0, 1, "checking thread deletions"))
        incomplete, leftovers = await check_deletions(
            deletions,
            journal,
            store,
            environment,
            settle_s=max(0.0, deadline - time.monotonic()),
            poll_s=poll_s,
            vectors=vectors,
        )
    unerased: list[str] = []
    erasure_leftovers: list[ErasureLeftover] = []
    if erasures is not None:
        progress(Progress("erasures", 0, 1, "checking user erasures"))
        unerased, erasure_leftovers = await check_erasures(
            erasures,
            journal,
            store,
            environment,
            settle_s=max(0.0, deadline - time.monotonic()),
            poll_s=poll_s,
        )
    return VerifyReport(
        environment=environment,
        journal_threads=len(threads),
        journal_messages=sum(t.messages for t in threads.values()),
        projection_threads=len(projection),
        projection_messages=sum(c.messages for c in projection.values()),
        pending_threads=result.pending_threads,
        pending_messages=result.pending_messages,
        differences=result.differences,
        seconds=round(time.monotonic() - started, 3),
        invalid_id_count=len(invalid),
        invalid_id_threads=tuple(thread_name(*key) for key in invalid[:INVALID_ID_NAMES]),
        incomplete_deletions=tuple(incomplete),
        deletion_leftovers=tuple(leftovers),
        incomplete_erasures=tuple(unerased),
        erasure_leftovers=tuple(erasure_leftovers),
    )


def render_differences(differences: Sequence[ThreadDiff], limit: int = 50) -> list[str]:
    """Readable lines, one per differing thread (at most `limit`, then a count of the rest)."""
    lines = []
    for diff in differences[:limit]:
        what = {
            "missing_thread": "missing from the projection",
            "fewer": "fewer messages in the projection",
            "more": "more messages in the projection than in the journal",
            "unknown_thread": "in the projection only (not in the journal)",
        }[diff.kind]
        lines.append(
            f"  {thread_name(diff.account_id, diff.thread_id)}: {what} "
            f"(journal {diff.journal}, projection {diff.projection})"
        )
    if len(differences) > limit:
        lines.append(f"  ... and {len(differences) - limit} more")
    return lines
