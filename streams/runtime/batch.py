"""Drive one batch through a processor: dead-letter poison records, retry transient failures.

`run_batch` returns when every record of the batch was either processed (the processor's
`process` returned for the records that remain) or dead-lettered and acknowledged by the broker.
Only then may the caller commit the batch's offsets. It never skips a record silently:
- `InvalidMessage(record)`: that record is dead-lettered, `process` is called again with the
  others (it may have applied some of them already: effects are idempotent by contract);
- `DeadLetterLimitExceeded`: raised at once (the processor must stop);
- any other exception (including a dead-letter record that was not acknowledged): the remaining
  batch is retried after a backoff, up to `max_attempts` failed tries in a row; then
  `ProcessorCrashed` is raised with the last error as its cause.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from streams.runtime.dlq import DeadLetterSink
from streams.runtime.errors import DeadLetterLimitExceeded, ProcessorCrashed
from streams.runtime.options import RuntimeOptions
from streams.runtime.processor import InvalidMessage, Processor, Record

log = logging.getLogger("memstream.runtime")


@dataclass
class BatchOutcome:
    """What happened to one batch: `calls` to `process`, records dead-lettered, retries slept."""

    calls: int = 0
    dead_lettered: int = 0
    retries: int = 0


async def run_batch(
    processor: Processor,
    batch: Sequence[Record],
    dead_letters: DeadLetterSink,
    options: RuntimeOptions,
    *,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> BatchOutcome:
    """Process `batch` to the end (see the module doc); raises `ProcessorCrashed`."""
    outcome = BatchOutcome()
    pending = list(batch)
    failures = 0
    while pending:
        outcome.calls += 1
        try:
            await processor.process(pending)
            return outcome
        except InvalidMessage as invalid:
            index = _index_of(pending, invalid.record)
            if index is None:
                raise ProcessorCrashed(
                    processor.name,
                    f"InvalidMessage for {invalid.record.position}, which is not in the batch it was given",
                ) from invalid
            try:
                await dead_letters.send(
                    invalid.record, reason=invalid.reason, error=invalid.error, attempts=outcome.calls
                )
            except DeadLetterLimitExceeded as exc:
                raise ProcessorCrashed(processor.name, exc.message) from exc
            except Exception as exc:  # the DLQ produce failed: transient, retry the batch
                failures = await _after_failure(processor, exc, failures, options, sleep, outcome)
                continue
            log.warning(
                "processor %s dead-lettered %s[%d]@%d: %s",
                processor.name,
                invalid.record.topic,
                invalid.record.partition,
                invalid.record.offset,
                invalid.reason,
            )
            del pending[index]
            outcome.dead_lettered += 1
            failures = 0
        except Exception as exc:
            failures = await _after_failure(processor, exc, failures, options, sleep, outcome)
    return outcome


def _index_of(pending: list[Record], record: Record) -> int | None:
    for i, candidate in enumerate(pending):
        if candidate.position == record.position:
            return i
    return None


async def _after_failure(
    processor: Processor,
    exc: Exception,
    failures: int,
    options: RuntimeOptions,
    sleep: Callable[[float], Awaitable[None]],
    outcome: BatchOutcome,
) -> int:
    failures += 1
    if failures >= options.max_attempts:
        raise ProcessorCrashed(
            processor.name, f"batch failed {failures} times in a row, last error: {exc!r}"
        ) from exc
    delay = options.backoff(failures)
    log.warning(
        "processor %s: batch failed (attempt %d of %d), retrying in %.2fs: %r",
        processor.name,
        failures,
        options.max_attempts,
        delay,
        exc,
    )
    outcome.retries += 1
    await sleep(delay)
    return failures
