"""run_batch with fakes (pure unit tests): dead letters, outages waited out without limit, poison
records isolated and dead-lettered, the dead-letter limit, stopping."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from streams.runtime.batch import run_batch
from streams.runtime.errors import (
    BatchAbandoned,
    DeadLetterLimitExceeded,
    DeadLetterUnavailable,
    ProcessorCrashed,
    SinkUnavailable,
)
from streams.runtime.options import RuntimeOptions
from streams.runtime.processor import InvalidMessage, Processor, Record

OPTIONS = RuntimeOptions(max_attempts=3, backoff_initial_s=0.1, backoff_max_s=0.15)


def record(offset: int, value: bytes = b"ok") -> Record:
    return Record("t", 0, offset, b"k", value, (), 0)


@dataclass
class ScriptedProcessor(Processor):
    """Applies b"ok" records, rejects b"bad" ones (InvalidMessage). The first `outage` calls raise
    ConnectionError; a batch holding an offset of `broken` raises ValueError (every time), or of
    `flaky` (offset -> how many more times)."""

    name: str = "scripted"
    source_topics: tuple[str, ...] = ("journal.messages",)
    outage: int = 0
    broken: set[int] = field(default_factory=set)
    flaky: dict[int, int] = field(default_factory=dict)
    applied: list[int] = field(default_factory=list)
    calls: list[list[int]] = field(default_factory=list)

    async def process(self, batch: Sequence[Record]) -> None:
        offsets = [r.offset for r in batch]
        self.calls.append(offsets)
        if self.outage:
            self.outage -= 1
            raise ConnectionError("sink away")
        for r in batch:
            if r.value == b"bad":
                raise InvalidMessage(r, "bad value") from ValueError("not json")
        if self.broken & set(offsets):
            raise ValueError(f"cannot build the summary path of {sorted(self.broken & set(offsets))}")
        for offset in offsets:
            if self.flaky.get(offset, 0) > 0:
                self.flaky[offset] -= 1
                raise RuntimeError(f"glitch at {offset}")
        self.applied.extend(offsets)


@dataclass
class FakeDeadLetters:
    sent: list[tuple[int, str, str, int]] = field(default_factory=list)
    fail_first: int = 0
    error: Exception | None = None
    limit: int = 100

    async def send(self, record: Record, *, reason: str, error: BaseException, attempts: int) -> None:
        if self.error is not None:
            raise self.error
        if self.fail_first:
            self.fail_first -= 1
            raise DeadLetterUnavailable("broker away")
        if len(self.sent) >= self.limit:
            raise DeadLetterLimitExceeded("too many")
        self.sent.append((record.offset, reason, type(error).__name__, attempts))


class FakeTime:
    """A sleep that only advances a clock."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def clock(self) -> float:
        return self.now


async def run(
    processor: Processor,
    batch: list[Record],
    dlq: FakeDeadLetters,
    time: FakeTime,
    options: RuntimeOptions = OPTIONS,
    **kwargs: object,
) -> object:
    return await run_batch(processor, batch, dlq, options, sleep=time.sleep, clock=time.clock, **kwargs)  # type: ignore[arg-type]


async def test_a_clean_batch_is_processed_once() -> None:
    processor, dlq, time = ScriptedProcessor(), FakeDeadLetters(), FakeTime()
    outcome = await run_batch(processor, [record(0), record(1)], dlq, OPTIONS, sleep=time.sleep)
    assert processor.calls == [[0, 1]]
    assert processor.applied == [0, 1]
    assert (outcome.calls, outcome.dead_lettered, outcome.retries, outcome.isolated) == (1, 0, 0, False)
    assert time.sleeps == [] and dlq.sent == []


async def test_poison_records_are_dead_lettered_and_the_rest_rerun() -> None:
    processor, dlq, time = ScriptedProcessor(), FakeDeadLetters(), FakeTime()
    batch = [record(0), record(1, b"bad"), record(2), record(3, b"bad"), record(4)]
    outcome = await run_batch(processor, batch, dlq, OPTIONS, sleep=time.sleep)
    assert processor.calls == [[0, 1, 2, 3, 4], [0, 2, 3, 4], [0, 2, 4]]
    assert processor.applied == [0, 2, 4]
    # reason, the cause's type as error type, and how many calls the batch took so far
    assert dlq.sent == [(1, "bad value", "ValueError", 1), (3, "bad value", "ValueError", 2)]
    assert outcome.dead_lettered == 2 and time.sleeps == []


async def test_a_batch_of_only_poison_ends_empty() -> None:
    processor, dlq = ScriptedProcessor(), FakeDeadLetters()
    outcome = await run_batch(processor, [record(0, b"bad")], dlq, OPTIONS, sleep=FakeTime().sleep)
    assert processor.applied == [] and outcome.dead_lettered == 1


async def test_a_record_failing_for_good_is_isolated_and_dead_lettered_and_the_rest_applied() -> None:
    """Regression (issue 9, finding 1): one record the processor can never handle (here a
    ValueError, as for a thread id the summary path cannot be built for) crashed the processor
    after `max_attempts`, and with it the node. Now it is isolated and dead-lettered with the
    error as its reason; every other record is applied, in order."""
    processor, dlq, time = ScriptedProcessor(broken={5}), FakeDeadLetters(), FakeTime()
    batch = [record(i) for i in range(8)]
    outcome = await run(processor, batch, dlq, time)
    assert processor.applied == [0, 1, 2, 3, 4, 6, 7]
    assert [(offset, error_type, attempts) for offset, _, error_type, attempts in dlq.sent] == [
        (5, "ValueError", OPTIONS.max_attempts)
    ]
    reason = dlq.sent[0][1]
    assert "cannot build the summary path of [5]" in reason and "ValueError" in reason
    assert outcome.isolated and outcome.dead_lettered == 1
    # the whole batch was tried max_attempts times, then halves once each, the record alone 3 times
    assert processor.calls[: OPTIONS.max_attempts] == [list(range(8))] * OPTIONS.max_attempts
    assert processor.calls[OPTIONS.max_attempts :] == [
        [0, 1, 2, 3],
        [4, 5, 6, 7],
        [4, 5],
        [4],
        [5],
        [5],
        [5],
        [6, 7],
    ]


async def test_a_single_record_batch_failing_for_good_is_dead_lettered_after_max_attempts() -> None:
    processor, dlq, time = ScriptedProcessor(broken={0}), FakeDeadLetters(), FakeTime()
    outcome = await run(processor, [record(0)], dlq, time)
    assert [s[0] for s in dlq.sent] == [0]
    assert len(processor.calls) == OPTIONS.max_attempts and processor.applied == []
    assert time.sleeps == [0.1, 0.15] and not outcome.isolated


async def test_a_record_that_recovers_alone_is_not_dead_lettered() -> None:
    # fails with the whole batch 3 times, then once more alone: it gets max_attempts tries alone
    processor, dlq, time = ScriptedProcessor(flaky={2: 4}), FakeDeadLetters(), FakeTime()
    await run(processor, [record(i) for i in range(4)], dlq, time)
    assert dlq.sent == []
    assert processor.applied == [0, 1, 2, 3]


async def test_outages_are_retried_with_capped_backoff_and_never_count_as_attempts() -> None:
    processor, dlq, time = ScriptedProcessor(outage=2), FakeDeadLetters(), FakeTime()
    outcome = await run(processor, [record(0), record(1)], dlq, time)
    assert processor.applied == [0, 1]
    assert time.sleeps == [0.1, 0.15]  # doubled, capped at backoff_max_s
    assert (outcome.outage_retries, outcome.retries, outcome.calls) == (2, 0, 3)


async def test_an_outage_longer_than_every_attempt_is_waited_out_without_dead_letters(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Regression: an unavailable store failed the batch `max_attempts` times and crashed the
    processor (only the ClickHouse projection had its own wait loop). Now the runtime waits: no
    dead letter, no crash, a bounded number of warnings, and the batch applied once it is back."""
    options = RuntimeOptions(max_attempts=3, backoff_initial_s=1.0, backoff_max_s=8.0, outage_log_every_s=30)
    processor, dlq, time = ScriptedProcessor(outage=12), FakeDeadLetters(), FakeTime()
    seen: list[str | None] = []
    with caplog.at_level(logging.INFO, logger="memstream.runtime"):
        outcome = await run(
            processor,
            [record(i) for i in range(4)],
            dlq,
            time,
            options,
            on_outage=lambda e: seen.append(None if e is None else type(e).__name__),
        )
    assert processor.applied == [0, 1, 2, 3] and dlq.sent == []
    assert len(processor.calls) == 13 and all(call == [0, 1, 2, 3] for call in processor.calls)
    assert time.sleeps == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0, 8.0, 8.0, 8.0, 8.0, 8.0, 8.0]
    assert outcome.outage_retries == 12 and not outcome.isolated
    assert seen == ["ConnectionError"] * 12 + [None]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    # bounded: the first failure, then at most one warning per 30 s of outage (87 s here)
    assert 2 <= len(warnings) <= 4
    assert any("available again" in r.getMessage() for r in caplog.records)


async def test_sink_unavailable_from_any_cause_is_an_outage() -> None:
    class Projection(ScriptedProcessor):
        async def process(self, batch: Sequence[Record]) -> None:
            self.calls.append([r.offset for r in batch])
            if len(self.calls) <= 5:
                raise SinkUnavailable("ClickHouse insert failed") from RuntimeError("Code: 210")
            self.applied.extend(r.offset for r in batch)

    processor, dlq, time = Projection(), FakeDeadLetters(), FakeTime()
    outcome = await run(processor, [record(0)], dlq, time)
    assert processor.applied == [0] and dlq.sent == [] and outcome.outage_retries == 5


async def test_an_unacknowledged_dead_letter_is_an_outage() -> None:
    processor, dlq, time = ScriptedProcessor(), FakeDeadLetters(fail_first=1), FakeTime()
    await run(processor, [record(0, b"bad"), record(1)], dlq, time)
    assert [s[0] for s in dlq.sent] == [0]
    assert processor.applied == [1] and time.sleeps == [0.1]


async def test_a_dead_letter_that_cannot_be_produced_is_a_crash() -> None:
    processor, dlq = ScriptedProcessor(), FakeDeadLetters(error=ValueError("payload too large"))
    with pytest.raises(ProcessorCrashed, match="cannot dead-letter t\\[0\\]@0") as raised:
        await run(processor, [record(0, b"bad")], dlq, FakeTime())
    assert isinstance(raised.value.__cause__, ValueError)


async def test_the_dead_letter_limit_crashes_at_once() -> None:
    processor, dlq, time = ScriptedProcessor(), FakeDeadLetters(limit=1), FakeTime()
    batch = [record(0, b"bad"), record(1, b"bad"), record(2)]
    with pytest.raises(ProcessorCrashed) as raised:
        await run(processor, batch, dlq, time)
    assert isinstance(raised.value.__cause__, DeadLetterLimitExceeded)
    assert [s[0] for s in dlq.sent] == [0] and processor.applied == [] and time.sleeps == []


async def test_invalid_message_for_a_foreign_record_is_a_crash() -> None:
    class Confused(ScriptedProcessor):
        async def process(self, batch: Sequence[Record]) -> None:
            raise InvalidMessage(record(99), "not mine")

    with pytest.raises(ProcessorCrashed, match="not in the batch"):
        await run(Confused(), [record(0)], FakeDeadLetters(), FakeTime())


async def test_stopping_abandons_a_waiting_batch_at_once_without_dead_letters() -> None:
    processor, dlq, stopping = ScriptedProcessor(outage=10**6, broken={0}), FakeDeadLetters(), asyncio.Event()
    asyncio.get_running_loop().call_later(0.2, stopping.set)
    options = RuntimeOptions(max_attempts=1, backoff_initial_s=30.0, backoff_max_s=30.0)
    started = asyncio.get_running_loop().time()
    with pytest.raises(BatchAbandoned):
        await run_batch(processor, [record(0)], dlq, options, stopping=stopping)
    assert asyncio.get_running_loop().time() - started < 5  # not the 30 s backoff
    # a failure seen while stopping is neither retried nor dead-lettered
    processor.outage = 0
    with pytest.raises(BatchAbandoned):
        await run_batch(processor, [record(0)], dlq, options, stopping=stopping)
    assert dlq.sent == [] and processor.applied == []
