"""`summarizer`: folds a thread's previous summary and its new messages into the next summary.

Input: `compaction.flushed` (key thread_id; the `compaction.requested` fields plus the flush's
status, which the summarizer ignores). Output: the thread's summary in object storage (through the
Redis cache), the thresholds' counters restarted and the flush-and-summarize guard released.

Per request (`Summarizer.handle`; the pure decisions are `step`, `next_summary` and `is_final`):

1. Take the thread's summarization lock (`summarization_lock_name`, a Redis lease of
   `LOCK_TTL_S`, renewed every third of it while the request is worked on, so a holder that dies -
   a node killed mid-summary - frees it within seconds). When another summarizer holds it, poll for
   up to `lock_wait_s`, re-reading the current summary each time: once it covers the request, the
   request is done. Still held after the wait -> `SummarizerBusy`, a transient error: the runtime
   retries the batch later. The lock only avoids duplicate model calls; correctness comes from the
   optimistic version check of the write.
2. `current = self.summaries.current(...)`. When it covers `to_offset` the request is done (redelivery,
   replay, or a racing summarizer won): nothing is written (idempotent).
3. Otherwise read the agent's messages after `current.last_message_offset` (-1 without one) up to
   `to_offset` from the journal, call `chat_model.summarize(current, messages,
   max_tokens=SUMMARY_MAX_TOKENS)` and write version `current.version + 1` (1 without one) with
   `expected_version=current.version`. A `SummaryVersionConflict` re-reads and re-checks (at most
   `MAX_CONFLICTS` times).
4. After the summary is durable (or found covering): settle the thread's compaction in the
   durable ledger (`CompactionLedger.settle`: the request in flight is closed, so recovery does
   not request it again), `reset_counters(scope, last + 1)` and release the guard, then the lock.

Summary versions never go backwards: the store is a `MonotonicSummaryStore` over a durable
high-water mark (Postgres), so after the summary objects were lost the next version continues
above the highest one ever written (the summary is then rebuilt from the journal).

Failures of the model or the storage (`ModelError`, `SummaryWriteFailed`, `SummaryUnavailable`,
`JournalUnavailable`) are retried after `retry_delays` (one more attempt per delay). A request
that still fails - or fails in a way retrying cannot fix (`ModelRequestRejected`,
`ModelUnsupported`, a `to_offset` the journal does not hold) - settles the compaction in the
ledger, releases the thread's guard (so it can be compacted again) and is dead-lettered
(`InvalidMessage`) with the reason. Redis errors
(lock, counters, guard) propagate as transient: the batch is retried by the runtime.

The guard is released only when it belongs to this request or an earlier one (its value is the
crossing offset, <= `to_offset`): a late redelivery never frees the guard of a newer crossing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from core.chat.base import ChatModel, ModelError, ModelRequestRejected, ModelUnsupported
from core.errors import JournalUnavailable, MemstreamError, ThreadDeleted
from core.journal.models import Message
from core.journal.reading import messages_between
from core.stores.compactions import CompactionLedger
from core.stores.journal import ThreadJournal
from core.stores.locks import Lease, Locks
from core.stores.thresholds import ThresholdStore
from core.summaries.models import (
    Summary,
    SummaryStore,
    SummaryUnavailable,
    SummaryVersionConflict,
    SummaryWriteFailed,
    summarization_lock_name,
)
from processors.errors import NeedsNodeJournal
from streams.codecs import compaction_flushed
from streams.codecs.compaction_flushed import CompactionFlushed
from streams.runtime.errors import SinkUnavailable
from streams.runtime.processor import InvalidMessage, Processor, Record, decoding

NAME = "summarizer"
SOURCE_TOPIC = "compaction.flushed"

SUMMARY_MAX_TOKENS = 500
"""The bound on every summary's size (o200k tokens), asked of the chat model."""
LOCK_TTL_S = 10.0
"""The summarization lock's lease, renewed every third of it while a request is worked on: a
summarizer that dies frees the thread within this long."""
LOCK_WAIT_S = 5.0
"""How long a request waits for another summarizer of its thread before the batch is retried."""
LOCK_POLL_S = 0.1
RETRY_DELAYS_S: tuple[float, ...] = (0.5, 2.0, 8.0)
"""Backoff between the attempts of one request (len + 1 attempts)."""
MAX_CONFLICTS = 5

log = logging.getLogger("memstream.summarizer")

Clock = Callable[[], datetime]
RETRIED: tuple[type[Exception], ...] = (
    ModelError,
    SummaryWriteFailed,
    SummaryUnavailable,
    JournalUnavailable,
)


class SummarizerBusy(SinkUnavailable):
    """Another summarizer held the thread's lock for the whole wait: the batch is retried without
    limit (the holder finishes, or its lease runs out)."""

    code = "summarizer_busy"


class RequestNotSatisfiable(MemstreamError):
    """The request names messages the journal does not hold: retrying cannot help."""

    code = "compaction_request_not_satisfiable"


FINAL: tuple[type[Exception], ...] = (
    ModelRequestRejected,
    ModelUnsupported,
    RequestNotSatisfiable,
    ThreadDeleted,
)
"""Failures retrying cannot fix: the request is dead-lettered at once."""


def covered(request: CompactionFlushed, summary: Summary | None) -> bool:
    """Whether `summary` already covers the request (the request is then done)."""
    return summary is not None and summary.last_message_offset >= request.to_offset


@dataclass(frozen=True, slots=True)
class Covered:
    """The request is done: `summary` covers it."""

    summary: Summary


@dataclass(frozen=True, slots=True)
class MessageRange:
    """Fold the agent's messages with `after < offset <= up_to` into the current summary (the
    journal must hold its message at `up_to`)."""

    after: int
    up_to: int


def step(request: CompactionFlushed, current: Summary | None) -> Covered | MessageRange:
    """What summarizing `request` over the `current` summary takes: nothing (covered), or the
    messages after it up to the request's `to_offset`."""
    if current is not None and covered(request, current):
        return Covered(current)
    return MessageRange(
        after=current.last_message_offset if current is not None else -1, up_to=request.to_offset
    )


def is_final(error: BaseException) -> bool:
    """Whether retrying cannot fix `error` (the request is dead-lettered at once)."""
    return isinstance(error, FINAL)


def is_retried(error: BaseException) -> bool:
    """Whether `error` is retried after a delay, then dead-letters the request (module doc)."""
    return isinstance(error, RETRIED) and not is_final(error)


def next_summary(
    current: Summary | None, messages: Sequence[Message], content: str, token_count: int, now: datetime
) -> Summary:
    """The summary following `current` that folds `messages` (non-empty, offset order)."""
    last = messages[-1]
    return Summary(
        version=current.version + 1 if current is not None else 1,
        timestamp=now,
        last_message_offset=last.offset,
        last_message_id=last.message_id,
        content=content,
        token_count=token_count,
        message_count=(current.message_count if current is not None else 0) + len(messages),
    )


class Summarizer(Processor):
    """The `summarizer` processor (module doc). Construction does no I/O: without `summaries`
    (the store, ideally monotonic and cached) `open_summaries` opens it in `start`, and without
    `chat_model` `chat_model_factory` builds it there. `ledger` is the node's durable record of
    compactions; `start` refuses (NeedsNodeJournal) without it or the journal. `closers` are
    awaited by `stop` (clients this processor owns; the chat model belongs to its giver)."""

    def __init__(
        self,
        *,
        thresholds: ThresholdStore,
        summaries: SummaryStore | None,
        locks: Locks,
        journal: ThreadJournal | None,
        ledger: CompactionLedger | None,
        chat_model: ChatModel | None = None,
        chat_model_factory: Callable[[], ChatModel] | None = None,
        open_summaries: Callable[[], SummaryStore] | None = None,
        name: str = NAME,
        retry_delays: Sequence[float] = RETRY_DELAYS_S,
        lock_ttl_s: float = LOCK_TTL_S,
        lock_wait_s: float = LOCK_WAIT_S,
        clock: Clock | None = None,
        closers: Sequence[Callable[[], object]] = (),
    ) -> None:
        self.name = name
        self.source_topics = (SOURCE_TOPIC,)
        self.thresholds = thresholds
        self._summaries = summaries
        self._open_summaries = open_summaries
        self.locks = locks
        self.journal = journal
        self.ledger = ledger
        self.chat_model = chat_model
        self._chat_model_factory = chat_model_factory
        self.retry_delays = tuple(retry_delays)
        self.lock_ttl_s = lock_ttl_s
        self.lock_wait_s = lock_wait_s
        self.clock: Clock = clock or (lambda: datetime.now(UTC))
        self._closers = tuple(closers)

    async def start(self) -> None:
        if self.journal is None or self.ledger is None:
            raise NeedsNodeJournal(
                "the summarizer reads the messages to summarize from the journal and settles "
                "compactions in the node's Postgres pool: it runs inside the node (`memstream up` / "
                "`memstream node`), not as a separate worker"
            )
        if self._summaries is None:
            if self._open_summaries is None:
                raise ValueError("the summarizer needs `summaries` or `open_summaries`")
            self._summaries = self._open_summaries()
        if self.chat_model is None:
            if self._chat_model_factory is None:
                raise ValueError("the summarizer needs `chat_model` or `chat_model_factory`")
            self.chat_model = self._chat_model_factory()

    @property
    def summaries(self) -> SummaryStore:
        if self._summaries is None:
            raise RuntimeError("the summarizer was not started")
        return self._summaries

    async def stop(self) -> None:
        for close in self._closers:
            result = close()
            if asyncio.iscoroutine(result):
                await result

    async def process(self, batch: Sequence[Record]) -> None:
        requests = []
        for record in batch:  # all-or-nothing before any effect
            with decoding(record):
                requests.append((record, compaction_flushed.decode(record.value)))
        for record, request in requests:
            await self.handle(record, request)

    async def handle(self, record: Record, request: CompactionFlushed) -> Summary:
        """Summarize for one request (module doc); the summary covering it."""
        lease = await self._lock(request)
        if lease is None:  # another summarizer covered the request while we waited
            covering = await self.summaries.current(request.thread, request.agent_id)
            assert covering is not None
            await self._ledger().settle(request.scope, covering.last_message_offset)
            return covering
        keeper = asyncio.create_task(self._keep(lease), name=f"memstream.summarizer.lease.{lease.name}")
        try:
            try:
                summary = await self._with_retries(request)
            except Exception as exc:
                if not (is_final(exc) or is_retried(exc)):
                    raise  # transient (Redis, Postgres, a bug): the runtime retries the batch
                await self._ledger().settle(request.scope, request.to_offset)
                await self._release_guard(request)
                reason = f"summarizing {_describe(request)} failed: {type(exc).__name__}: {exc}"
                log.error("%s; dead-lettered, guard released", reason)
                raise InvalidMessage(record, reason) from exc
            await self._ledger().settle(request.scope, summary.last_message_offset)
            await self.thresholds.reset_counters(request.scope, summary.last_message_offset + 1)
            await self._release_guard(request)
            return summary
        finally:
            keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keeper
            try:
                await self.locks.release(lease)
            except MemstreamError as exc:
                log.warning("cannot release %s (%s); its lease frees it", lease.name, exc)

    async def _keep(self, lease: Lease) -> None:
        """Renew `lease` every third of its TTL until cancelled (a failed renewal is logged: the
        version check keeps the work correct without the lock)."""
        while True:
            await asyncio.sleep(lease.ttl_ms / 3000)
            try:
                renewed = await self.locks.extend(lease)
            except MemstreamError as exc:
                log.warning("cannot renew %s (%s); retrying", lease.name, exc)
                continue
            if renewed is None:
                log.warning("lost the lock %s while summarizing; going on (versions are checked)", lease.name)
                return

    def _ledger(self) -> CompactionLedger:
        if self.ledger is None:
            raise NeedsNodeJournal("the summarizer needs the node's Postgres pool")
        return self.ledger

    async def _lock(self, request: CompactionFlushed) -> Lease | None:
        """The thread's lock, or None when the request got covered while another holder worked."""
        name = summarization_lock_name(request.thread, request.agent_id)
        deadline = asyncio.get_running_loop().time() + self.lock_wait_s
        while True:
            lease = await self.locks.acquire(name, self.lock_ttl_s)
            if lease is not None:
                return lease
            if covered(request, await self.summaries.current(request.thread, request.agent_id)):
                return None
            if asyncio.get_running_loop().time() >= deadline:
                raise SummarizerBusy(f"another summarizer holds {name!r}")
            await asyncio.sleep(LOCK_POLL_S)

    async def _with_retries(self, request: CompactionFlushed) -> Summary:
        for delay in (*self.retry_delays, None):
            try:
                return await self._summarize(request)
            except Exception as exc:
                if delay is None or not is_retried(exc):
                    raise
                log.warning(
                    "summarizing %s failed (%s: %s); retrying in %.2f s",
                    _describe(request),
                    type(exc).__name__,
                    exc,
                    delay,
                )
                await asyncio.sleep(delay)
        raise AssertionError("unreachable")

    async def _summarize(self, request: CompactionFlushed) -> Summary:
        """One attempt: read, fold, write with the version check (re-checking after conflicts)."""
        model = self.chat_model
        if model is None:
            raise RuntimeError("the summarizer was not started")
        for _ in range(MAX_CONFLICTS):
            current = await self.summaries.current(request.thread, request.agent_id)
            todo = step(request, current)
            if isinstance(todo, Covered):
                return todo.summary
            messages = await self._messages(request, todo)
            draft = await model.summarize(current, messages, max_tokens=SUMMARY_MAX_TOKENS)
            new = next_summary(current, messages, draft.content, draft.token_count, self.clock())
            try:
                written = await self.summaries.write(
                    request.thread,
                    request.agent_id,
                    new,
                    expected_version=current.version if current is not None else None,
                )
            except SummaryVersionConflict as exc:
                log.info("summary of %s changed meanwhile (%s); re-reading", _describe(request), exc)
                continue
            log.info(
                "summary v%d of %s: offsets up to %d, %d messages folded, %d tokens (%s)",
                written.version,
                _describe(request),
                written.last_message_offset,
                len(messages),
                written.token_count,
                draft.prompt_version,
            )
            return written
        raise SummaryWriteFailed(f"summary of {_describe(request)} kept changing ({MAX_CONFLICTS} conflicts)")

    async def _messages(self, request: CompactionFlushed, todo: MessageRange) -> list[Message]:
        """The agent's messages of `todo` (the last one is at its `up_to`)."""
        journal = self.journal
        if journal is None:
            raise NeedsNodeJournal("the summarizer needs the node's journal")
        found = await messages_between(
            journal, request.thread, after=todo.after, up_to=todo.up_to, agent_id=request.agent_id
        )
        if not found or found[-1].offset != todo.up_to:
            raise RequestNotSatisfiable(
                f"the journal holds no message of agent {request.agent_id!r} at offset {todo.up_to}"
            )
        return found

    async def _release_guard(self, request: CompactionFlushed) -> None:
        """Release the thread's guard unless it belongs to a later crossing (module doc)."""
        await self.thresholds.release_guard(request.scope, up_to=request.to_offset)


def _describe(request: CompactionFlushed) -> str:
    return (
        f"{request.environment}/{request.account_id}/{request.agent_id}/{request.thread_id}"
        f"@{request.to_offset}"
    )
