"""Errors of the processor runtime, one meaning each."""

from __future__ import annotations

from memstream.errors import MemstreamError


class ProcessorCrashed(MemstreamError):
    """A processor stopped for good without committing past its failing batch.

    `processor` names it; `__cause__` is the reason (the last transient error after all retries,
    `DeadLetterLimitExceeded`, or a bug in the runtime). Its uncommitted records are redelivered
    to the consumer group when it runs again.
    """

    code = "processor_crashed"

    def __init__(self, processor: str, message: str) -> None:
        super().__init__(f"processor {processor!r} crashed: {message}")
        self.processor = processor


class DeadLetterLimitExceeded(MemstreamError):
    """More records were dead-lettered in the window than the limit allows: rather than
    dead-lettering a whole bad deploy, the processor stops (the record was not dead-lettered)."""

    code = "dead_letter_limit_exceeded"


class DeadLetterUnavailable(MemstreamError):
    """A dead-letter record was not acknowledged by the broker in time (transient: retried)."""

    code = "dead_letter_unavailable"


class UnknownProcessor(MemstreamError):
    """No processor of that name is registered. `available` lists the registered names."""

    code = "unknown_processor"

    def __init__(self, name: str, available: list[str]) -> None:
        names = ", ".join(sorted(available)) or "(none registered yet)"
        super().__init__(f"unknown processor {name!r}; registered processors: {names}")
        self.name = name
        self.available = sorted(available)
