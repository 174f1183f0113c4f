"""run_batch with fakes (pure unit tests): dead letters, retries, give-up, DLQ limit."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from streams.runtime.batch import run_batch
from streams.runtime.errors import DeadLetterLimitExceeded, DeadLetterUnavailable, ProcessorCrashed
from streams.runtime.options import RuntimeOptions
from streams.runtime.processor import InvalidMessage, Processor, Record

OPTIONS = RuntimeOptions(max_attempts=3, backoff_initial_s=0.1, backoff_max_s=0.15)


def record(offset: int, value: bytes = b"ok") -> Record:
    return Record("t", 0, offset, b"k", value, (), 0)


@dataclass
class ScriptedProcessor(Processor):
    """Applies b"ok" records, rejects b"bad" ones (InvalidMessage); first fails `transient` times."""

    name: str = "scripted"
    source_topics: tuple[str, ...] = ("journal.messages",)
    transient: int = 0
    applied: list[int] = field(default_factory=list)
    calls: list[list[int]] = field(default_factory=list)

    async def process(self, batch: Sequence[Record]) -> None:
        self.calls.append([r.offset for r in batch])
        if self.transient:
            self.transient -= 1
            raise ConnectionError("sink away")
        for r in batch:
            if r.value == b"bad":
                raise InvalidMessage(r, "bad value") from ValueError("not json")
        self.applied.extend(r.offset for r in batch)


@dataclass
class FakeDeadLetters:
    sent: list[tuple[int, str, str, int]] = field(default_factory=list)
    fail_first: int = 0
    limit: int = 100

    async def send(self, record: Record, *, reason: str, error: BaseException, attempts: int) -> None:
        if self.fail_first:
            self.fail_first -= 1
            raise DeadLetterUnavailable("broker away")
        if len(self.sent) >= self.limit:
            raise DeadLetterLimitExceeded("too many")
        self.sent.append((record.offset, reason, type(error).__name__, attempts))


class Sleeps(list[float]):
    async def __call__(self, seconds: float) -> None:
        self.append(seconds)


async def test_a_clean_batch_is_processed_once() -> None:
    processor, dlq, sleeps = ScriptedProcessor(), FakeDeadLetters(), Sleeps()
    outcome = await run_batch(processor, [record(0), record(1)], dlq, OPTIONS, sleep=sleeps)
    assert processor.calls == [[0, 1]]
    assert processor.applied == [0, 1]
    assert (outcome.calls, outcome.dead_lettered, outcome.retries) == (1, 0, 0)
    assert sleeps == [] and dlq.sent == []


async def test_poison_records_are_dead_lettered_and_the_rest_rerun() -> None:
    processor, dlq, sleeps = ScriptedProcessor(), FakeDeadLetters(), Sleeps()
    batch = [record(0), record(1, b"bad"), record(2), record(3, b"bad"), record(4)]
    outcome = await run_batch(processor, batch, dlq, OPTIONS, sleep=sleeps)
    assert processor.calls == [[0, 1, 2, 3, 4], [0, 2, 3, 4], [0, 2, 4]]
    assert processor.applied == [0, 2, 4]
    # reason, the cause's type as error type, and how many calls the batch took so far
    assert dlq.sent == [(1, "bad value", "ValueError", 1), (3, "bad value", "ValueError", 2)]
    assert outcome.dead_lettered == 2 and sleeps == []


async def test_a_batch_of_only_poison_ends_empty() -> None:
    processor, dlq = ScriptedProcessor(), FakeDeadLetters()
    outcome = await run_batch(processor, [record(0, b"bad")], dlq, OPTIONS, sleep=Sleeps())
    assert processor.applied == [] and outcome.dead_lettered == 1


async def test_transient_errors_are_retried_with_backoff() -> None:
    processor, dlq, sleeps = ScriptedProcessor(transient=2), FakeDeadLetters(), Sleeps()
    outcome = await run_batch(processor, [record(0), record(1)], dlq, OPTIONS, sleep=sleeps)
    assert processor.applied == [0, 1]
    assert sleeps == [0.1, 0.15]  # doubled, capped at backoff_max_s
    assert outcome.retries == 2 and outcome.calls == 3


async def test_after_max_attempts_the_processor_crashes_with_the_cause() -> None:
    processor, dlq, sleeps = ScriptedProcessor(transient=99), FakeDeadLetters(), Sleeps()
    with pytest.raises(ProcessorCrashed) as raised:
        await run_batch(processor, [record(0)], dlq, OPTIONS, sleep=sleeps)
    assert raised.value.processor == "scripted"
    assert isinstance(raised.value.__cause__, ConnectionError)
    assert len(processor.calls) == OPTIONS.max_attempts and processor.applied == []


async def test_an_unacknowledged_dead_letter_is_retried() -> None:
    processor, dlq, sleeps = ScriptedProcessor(), FakeDeadLetters(fail_first=1), Sleeps()
    await run_batch(processor, [record(0, b"bad"), record(1)], dlq, OPTIONS, sleep=sleeps)
    assert [s[0] for s in dlq.sent] == [0]
    assert processor.applied == [1] and sleeps == [0.1]


async def test_the_dead_letter_limit_crashes_at_once() -> None:
    processor, dlq, sleeps = ScriptedProcessor(), FakeDeadLetters(limit=1), Sleeps()
    batch = [record(0, b"bad"), record(1, b"bad"), record(2)]
    with pytest.raises(ProcessorCrashed) as raised:
        await run_batch(processor, batch, dlq, OPTIONS, sleep=sleeps)
    assert isinstance(raised.value.__cause__, DeadLetterLimitExceeded)
    assert [s[0] for s in dlq.sent] == [0] and processor.applied == [] and sleeps == []


async def test_invalid_message_for_a_foreign_record_is_a_crash() -> None:
    class Confused(ScriptedProcessor):
        async def process(self, batch: Sequence[Record]) -> None:
            raise InvalidMessage(record(99), "not mine")

    with pytest.raises(ProcessorCrashed, match="not in the batch"):
        await run_batch(Confused(), [record(0)], FakeDeadLetters(), OPTIONS, sleep=Sleeps())
