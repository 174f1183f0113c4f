"""The dead-letter limit (pure) and the dead-letter producer's failure modes."""

from __future__ import annotations

import pytest

from core.config import Settings
from memstream.embedded.process import free_port
from streams.runtime.dlq import DeadLetterLimit, DeadLetterQueue
from streams.runtime.errors import DeadLetterLimitExceeded, DeadLetterUnavailable
from streams.runtime.options import RuntimeOptions
from streams.runtime.processor import Record
from streams.topics import UndeclaredTopic, default_registry


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_limit_allows_limit_dead_letters_per_sliding_window() -> None:
    clock = Clock()
    limit = DeadLetterLimit(2, 60.0, clock)
    for t in (0.0, 30.0):
        clock.now = t
        limit.check("p")
        limit.record()
    clock.now = 59.9
    with pytest.raises(DeadLetterLimitExceeded, match="dead-lettered 2 records within 60 s"):
        limit.check("p")
    clock.now = 60.0  # the first one left the window
    limit.check("p")
    limit.record()
    with pytest.raises(DeadLetterLimitExceeded):
        limit.check("p")


def test_a_zero_limit_refuses_every_dead_letter() -> None:
    with pytest.raises(DeadLetterLimitExceeded):
        DeadLetterLimit(0, 60.0).check("p")


def test_backoff_doubles_up_to_the_cap() -> None:
    options = RuntimeOptions(backoff_initial_s=0.5, backoff_max_s=3.0)
    assert [options.backoff(n) for n in (1, 2, 3, 4, 5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    with pytest.raises(ValueError):
        RuntimeOptions(session_timeout_s=1.0, heartbeat_interval_s=1.0)


def test_a_processor_without_a_declared_dead_letter_topic_is_refused() -> None:
    with pytest.raises(UndeclaredTopic, match=r"dead_letter\.processors"):
        DeadLetterQueue("undeclared", Settings(), limit=DeadLetterLimit(1, 60))


async def test_an_unacknowledged_dead_letter_raises_unavailable() -> None:
    settings = Settings(broker_url=f"kafka://127.0.0.1:{free_port()}")  # nothing listens there
    registry = default_registry().with_dead_letter("writer")
    limit = DeadLetterLimit(5, 60)
    dlq = DeadLetterQueue("writer", settings, limit=limit, ack_timeout_s=0.5, registry=registry)
    record = Record("t.journal.messages", 0, 1, b"k", b"v", (), None)
    try:
        with pytest.raises(DeadLetterUnavailable, match=r"dlq\.writer"):
            await dlq.send(record, reason="bad", error=ValueError("bad"), attempts=1)
    finally:
        await dlq.close()
    limit.check("writer")  # an undelivered dead letter does not count toward the limit
