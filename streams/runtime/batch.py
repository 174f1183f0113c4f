"""Drive one batch through a processor: wait out outages, isolate and dead-letter poison records.

`run_batch` returns when every record of the batch was either processed (`process` returned for
a sub-batch holding it) or dead-lettered and acknowledged by the broker. Only then may the caller
commit the batch's offsets. It never skips a record silently, and no record can stop it:
- `InvalidMessage(record)`: that record is dead-lettered at once and `process` is called again
  with the others (it may have applied some of them already: effects are idempotent by contract);
- an outage (`streams.runtime.outages.is_outage`: `SinkUnavailable`, connection errors, an
  unacknowledged dead letter, ...): the same records are retried without limit, sleeping
  `options.backoff(n)` (capped), with a warning at the first failure, then at most every
  `options.outage_log_every_s`, and a line when it is over; nothing is dead-lettered for it;
- any other exception: the records are retried up to `options.max_attempts` failed tries in a
  row; then they are isolated by bisection: each half is tried once, in order, and a half that
  fails is split again, down to single records; a record that fails `max_attempts` times in a
  row alone is dead-lettered with the error as its reason (`error_type` = the error's class).
  The others proceed, in their order.
It raises only:
- `ProcessorCrashed` when a record cannot be dead-lettered (the dead-letter limit was reached:
  `DeadLetterLimitExceeded` is the cause; or producing it failed with an error that is not an
  outage), or when `process` rejected a record that is not in the batch it was given (a bug);
- `BatchAbandoned` when `stopping` is set while the batch is failing or waiting: it must not be
  committed (it is redelivered later), and nothing more is retried or dead-lettered.
`on_outage(error)` (optional) is called while the batch waits out an outage, and with None once
it is over.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from streams.runtime.dlq import DeadLetterSink
from streams.runtime.errors import BatchAbandoned, DeadLetterLimitExceeded, ProcessorCrashed
from streams.runtime.options import RuntimeOptions
from streams.runtime.outages import is_outage
from streams.runtime.processor import InvalidMessage, Processor, Record

log = logging.getLogger("memstream.runtime")

REASON_MAX_CHARS = 2000
"""A dead letter's reason built from an error message is cut to this length."""

Sleep = Callable[[float], Awaitable[None]]
Clock = Callable[[], float]
OutageObserver = Callable[[BaseException | None], None]


@dataclass
class BatchOutcome:
    """What happened to one batch: `calls` to `process`, records dead-lettered, sleeps after
    errors (`retries`) and during outages (`outage_retries`), whether it was `isolated`."""

    calls: int = 0
    dead_lettered: int = 0
    retries: int = 0
    outage_retries: int = 0
    isolated: bool = False


async def run_batch(
    processor: Processor,
    batch: Sequence[Record],
    dead_letters: DeadLetterSink,
    options: RuntimeOptions,
    *,
    sleep: Sleep = asyncio.sleep,
    clock: Clock = time.monotonic,
    stopping: asyncio.Event | None = None,
    on_outage: OutageObserver | None = None,
) -> BatchOutcome:
    """Process `batch` to the end (see the module doc); raises `ProcessorCrashed` or `BatchAbandoned`."""
    run = _BatchRun(processor, dead_letters, options, sleep, clock, stopping, on_outage)
    await run.run(list(batch))
    return run.outcome


class _BatchRun:
    def __init__(
        self,
        processor: Processor,
        dead_letters: DeadLetterSink,
        options: RuntimeOptions,
        sleep: Sleep,
        clock: Clock,
        stopping: asyncio.Event | None,
        on_outage: OutageObserver | None,
    ) -> None:
        self.processor = processor
        self.dead_letters = dead_letters
        self.options = options
        self.sleep = sleep
        self.clock = clock
        self.stopping = stopping
        self.on_outage = on_outage
        self.outcome = BatchOutcome()
        self._outage_failures = 0
        self._outage_since = 0.0
        self._outage_logged = 0.0

    async def run(self, batch: list[Record]) -> None:
        attempts = self.options.max_attempts
        parts: list[tuple[list[Record], int]] = [(batch, attempts)]  # records, tries allowed
        while parts:
            records, allowed = parts.pop(0)
            error = await self._process(records, allowed)
            if error is None:
                continue
            if len(records) == 1:
                reason = f"failed {allowed} times in a row alone: {type(error).__name__}: {error}"
                await self._dead_letter(records[0], _cut(reason), error, allowed)
                continue
            if not self.outcome.isolated:
                self.outcome.isolated = True
                log.warning(
                    "processor %s: a batch of %d records failed %d times (%r); isolating the record(s) "
                    "causing it",
                    self.processor.name,
                    len(records),
                    allowed,
                    error,
                )
            half = len(records) // 2
            halves = [records[:half], records[half:]]
            parts[:0] = [(h, 1 if len(h) > 1 else attempts) for h in halves]

    async def _process(self, records: list[Record], allowed: int) -> Exception | None:
        """Process `records` (dead-lettering rejected ones, waiting out outages); the error when
        the rest failed `allowed` times in a row for another reason, else None."""
        failures = 0
        while records:
            self.outcome.calls += 1
            try:
                await self.processor.process(list(records))
            except InvalidMessage as invalid:
                index = _index_of(records, invalid.record)
                if index is None:
                    raise ProcessorCrashed(
                        self.processor.name,
                        f"InvalidMessage for {invalid.record.position}, which is not in the batch "
                        "it was given",
                    ) from invalid
                await self._dead_letter(invalid.record, invalid.reason, invalid.error, self.outcome.calls)
                del records[index]
                failures = 0
                continue
            except Exception as exc:
                self._abandon_if_stopping(exc)
                if is_outage(exc):
                    await self._wait_out(exc, len(records))
                    continue
                failures += 1
                if failures >= allowed:
                    return exc
                delay = self.options.backoff(failures)
                log.warning(
                    "processor %s: %d record(s) failed (attempt %d of %d), retrying in %.2fs: %r",
                    self.processor.name,
                    len(records),
                    failures,
                    allowed,
                    delay,
                    exc,
                )
                self.outcome.retries += 1
                await self._pause(delay)
                continue
            self._outage_over()
            return None
        return None

    async def _dead_letter(self, record: Record, reason: str, error: BaseException, attempts: int) -> None:
        while True:
            try:
                await self.dead_letters.send(record, reason=reason, error=error, attempts=attempts)
            except DeadLetterLimitExceeded as exc:
                raise ProcessorCrashed(self.processor.name, exc.message) from exc
            except Exception as exc:
                self._abandon_if_stopping(exc)
                if is_outage(exc):
                    await self._wait_out(exc, 1)
                    continue
                raise ProcessorCrashed(
                    self.processor.name,
                    f"cannot dead-letter {record.topic}[{record.partition}]@{record.offset} "
                    f"(reason: {reason}): {exc!r}",
                ) from exc
            self._outage_over()
            log.warning(
                "processor %s dead-lettered %s[%d]@%d: %s",
                self.processor.name,
                record.topic,
                record.partition,
                record.offset,
                reason,
            )
            self.outcome.dead_lettered += 1
            return

    async def _wait_out(self, exc: Exception, held: int) -> None:
        """One backoff of an outage (rate-limited warnings; `on_outage` told)."""
        now = self.clock()
        self._outage_failures += 1
        if self._outage_failures == 1:
            self._outage_since = self._outage_logged = now
            log.warning(
                "processor %s: unavailable, waiting (%d record(s) held, nothing dead-lettered): %s",
                self.processor.name,
                held,
                _describe(exc),
            )
        elif now - self._outage_logged >= self.options.outage_log_every_s:
            self._outage_logged = now
            log.warning(
                "processor %s: still unavailable after %.0fs (%d attempts), %d record(s) held: %s",
                self.processor.name,
                now - self._outage_since,
                self._outage_failures,
                held,
                _describe(exc),
            )
        if self.on_outage is not None:
            self.on_outage(exc)
        self.outcome.outage_retries += 1
        await self._pause(self.options.backoff(self._outage_failures))

    def _outage_over(self) -> None:
        if not self._outage_failures:
            return
        log.info(
            "processor %s: available again after %.1fs (%d failed attempts)",
            self.processor.name,
            self.clock() - self._outage_since,
            self._outage_failures,
        )
        self._outage_failures = 0
        if self.on_outage is not None:
            self.on_outage(None)

    async def _pause(self, delay: float) -> None:
        """Sleep `delay`; `BatchAbandoned` as soon as `stopping` is set."""
        if self.stopping is None:
            await self.sleep(delay)
            return
        self._abandon_if_stopping(None)
        sleeper = asyncio.ensure_future(self.sleep(delay))
        stopper = asyncio.ensure_future(self.stopping.wait())
        try:
            await asyncio.wait({sleeper, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            sleeper.cancel()
            stopper.cancel()
        self._abandon_if_stopping(None)

    def _abandon_if_stopping(self, exc: BaseException | None) -> None:
        if self.stopping is not None and self.stopping.is_set():
            raise BatchAbandoned(
                f"processor {self.processor.name!r} is stopping: the batch is left uncommitted"
            ) from exc


def _index_of(pending: list[Record], record: Record) -> int | None:
    for i, candidate in enumerate(pending):
        if candidate.position == record.position:
            return i
    return None


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _cut(text: str) -> str:
    return text if len(text) <= REASON_MAX_CHARS else text[: REASON_MAX_CHARS - 1] + "…"
