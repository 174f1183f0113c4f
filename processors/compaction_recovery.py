"""Compaction recovery: every compaction in flight completes, whatever Redis or the broker lost.

`thresholds` records each compaction request in Postgres before producing it, and the summarizer
settles it once a summary covers it (`sinks.postgres.compactions`). A request still open is on its
way - or lost: the memory-only embedded broker restarted (its topics and consumer offsets are
gone), a topic was deleted, a record was never consumed. `CompactionRecovery` (hosted by the node,
next to the processors) requests open compactions again:

- every open request at once, when the compaction topics are new: at node start when
  `apply_topics` created `compaction.requested` or `compaction.flushed` (the broker lost them),
  whenever the node applies the topics again and they were created (`topics_applied`), and
  whenever the node's topic check finds either topic to be another one than before
  (`topics_lost`: a broker that lost its topics, whoever declared them again);
- otherwise, every `interval_s`, each request open for longer than `rerequest_after_s`: a safety
  net for a loss nobody noticed (a request merely queued behind a long backlog is then requested
  twice, which is harmless).

Requesting again = take the thread's guard again when Redis lost it (so `thresholds` does not
request a second compaction meanwhile) and produce the recorded `compaction.requested` value
again (`Thresholds.request_again`). Duplicates are harmless by contract: the flush stores the same
facts again as no-ops and the summarizer finds the request covered (its optimistic version check
never lets two summaries of one version both win). After `max_rerequests` re-requests without a
summary the compaction is given up: settled in the ledger and its guard released, logged as an
error (the thread is compacted again at its next crossing).

It also completes crossings that `thresholds` held back while a request was in flight (the guard
was held): once no request is in flight any more, the thread is re-evaluated
(`Thresholds.reevaluate`: its counters are rebuilt from the journal since the new summary) and
compacted again when it is still over a threshold, without waiting for another message.

A publish that finds a compaction topic missing calls `on_topic_missing` (the node re-applies the
topics, which brings it back here through `topics_applied`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from core.stores.compactions import CompactionLedger, OpenCompaction
from core.stores.thresholds import ThreadScope
from processors.thresholds import RequestNotDelivered, Thresholds
from streams.producer import RecordsNotConfirmed

log = logging.getLogger("memstream.compaction_recovery")

NAME = "compaction-recovery"

LOST_WITH = ("compaction.requested", "compaction.flushed")
"""Topics whose (re)creation means requests on their way may have been lost."""
INTERVAL_S = 5.0
REREQUEST_AFTER_S = 120.0
MAX_REREQUESTS = 5
SWEEP_LIMIT = 1000

Clock = Callable[[], datetime]


def requests_lost(created: Iterable[str]) -> bool:
    """Whether topics newly created (an `ApplyReport.created`) mean requests may have been lost."""
    return any(name in LOST_WITH for name in created)


@dataclass
class SweepResult:
    """What one sweep did, per thread."""

    requested_again: list[ThreadScope] = field(default_factory=list)
    reevaluated: list[ThreadScope] = field(default_factory=list)
    given_up: list[ThreadScope] = field(default_factory=list)


class CompactionRecovery:
    """See the module doc. `thresholds` is a `Thresholds` of its own (not consuming: its counting,
    emitting and publisher are used), started and stopped by `run`."""

    def __init__(
        self,
        thresholds: Thresholds,
        ledger: CompactionLedger,
        *,
        interval_s: float = INTERVAL_S,
        rerequest_after_s: float = REREQUEST_AFTER_S,
        max_rerequests: int = MAX_REREQUESTS,
        lost_at_start: bool = False,
        on_topic_missing: Callable[[], Awaitable[None]] | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.thresholds = thresholds
        self.ledger = ledger
        self.interval_s = interval_s
        self.rerequest_after_s = rerequest_after_s
        self.max_rerequests = max_rerequests
        self.on_topic_missing = on_topic_missing
        self.clock: Clock = clock or (lambda: datetime.now(UTC))
        self._everything = lost_at_start
        self._wake = asyncio.Event()

    def topics_applied(self, created: Iterable[str]) -> None:
        """The node applied the topics; `created` are those it had to create. When the compaction
        topics are among them, every open request is requested again at once."""
        if requests_lost(created):
            self.topics_lost("were created anew")

    def topics_lost(self, why: str = "are not the topics the open requests were produced on") -> None:
        """The compaction topics lost what was produced to them (`why`, for the log): every open
        request is requested again at once. Called by `topics_applied`, and by the node's topic
        check (`streams.topic_guards.CompactionTopicGuard`), which sees a topic that is new however
        it came back."""
        log.warning("the compaction topics %s: requesting every open compaction again", why)
        self._everything = True
        self._wake.set()

    async def run(self, stop: asyncio.Event) -> None:
        """Sweep now and every `interval_s` until `stop` is set. A failing sweep is logged and
        retried at the next interval (nothing is lost: the ledger keeps every open compaction)."""
        await self.thresholds.start()
        aborter = asyncio.create_task(self._abort_on(stop))
        try:
            while not stop.is_set():
                everything, self._everything = self._everything, False
                try:
                    await self.sweep(everything=everything)
                except Exception as exc:
                    if stop.is_set():
                        break
                    self._everything = self._everything or everything
                    log.warning(
                        "compaction recovery sweep failed (%s: %s); retrying in %.0f s",
                        type(exc).__name__,
                        exc,
                        self.interval_s,
                    )
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wait(stop), self.interval_s)
        finally:
            aborter.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await aborter
            await self.thresholds.stop()

    async def sweep(self, *, everything: bool = False) -> SweepResult:
        """One pass (module doc): every open request when `everything`, else those open for longer
        than `rerequest_after_s`; and the held-back crossings to re-evaluate."""
        cutoff = None if everything else self.clock() - timedelta(seconds=self.rerequest_after_s)
        result = SweepResult()
        rows = await self.ledger.open_compactions(requested_before=cutoff, limit=SWEEP_LIMIT)
        in_flight = [row for row in rows if row.request is not None]
        again = [row for row in in_flight if row.rerequests < self.max_rerequests]
        for row in in_flight:
            if row.rerequests >= self.max_rerequests:
                await self._give_up(row)
                result.given_up.append(row.scope)
        await self._request_again(again)
        result.requested_again.extend(row.scope for row in again)
        for row in rows:
            if row.request is None and row.crossed_offset is not None:
                await self._reevaluate(row)
                result.reevaluated.append(row.scope)
        return result

    async def _request_again(self, rows: Sequence[OpenCompaction]) -> None:
        if not rows:
            return
        requests = [(row.scope, row.request) for row in rows if row.request is not None]
        try:
            await self.thresholds.request_again(requests)
        except RequestNotDelivered as exc:
            cause = exc.__cause__
            if (
                self.on_topic_missing is not None
                and isinstance(cause, RecordsNotConfirmed)
                and cause.topic_missing
            ):
                await self.on_topic_missing()
            raise
        await self.ledger.rerequested(
            [(row.scope, row.to_offset) for row in rows if row.to_offset is not None]
        )
        for row in rows:
            log.warning(
                "compaction of %s up to offset %s requested again (attempt %d): its request may have "
                "been lost",
                _describe(row.scope),
                row.to_offset,
                row.rerequests + 1,
            )

    async def _give_up(self, row: OpenCompaction) -> None:
        assert row.to_offset is not None
        await self.ledger.settle(row.scope, row.to_offset)
        await self.thresholds.store.release_guard(row.scope, up_to=row.to_offset)
        log.error(
            "compaction of %s up to offset %d gave no summary after %d requests: given up, guard "
            "released (the thread is compacted again at its next crossing; check the flush and "
            "summarizer processors and their dead-letter topics)",
            _describe(row.scope),
            row.to_offset,
            row.rerequests + 1,
        )

    async def _reevaluate(self, row: OpenCompaction) -> None:
        assert row.crossed_offset is not None
        outcome = await self.thresholds.reevaluate(row.scope)
        if outcome is not None and outcome.kind == "guarded":
            return  # another compaction is in flight: re-evaluated once it is settled
        if outcome is None or not outcome.emits:
            await self.ledger.forget_crossing(row.scope, row.crossed_offset)
        log.info(
            "held-back crossing of %s at offset %d re-evaluated: %s",
            _describe(row.scope),
            row.crossed_offset,
            outcome.kind if outcome is not None else "no message",
        )

    async def _wait(self, stop: asyncio.Event) -> None:
        waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(self._wake.wait())]
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()

    async def _abort_on(self, stop: asyncio.Event) -> None:
        await stop.wait()
        self.thresholds.stopping()  # a publish waiting on an unreachable broker gives up now


def _describe(scope: ThreadScope) -> str:
    return f"{scope.environment}/{scope.account_id}/{scope.agent_id}/{scope.thread_id}"
