"""Errors of the processor runtime, one meaning each."""

from __future__ import annotations

from core.errors import MemstreamError, StoreUnavailable


class ProcessorCrashed(MemstreamError):
    """A processor stopped without committing past its failing batch.

    `processor` names it; `__cause__` is the reason (`DeadLetterLimitExceeded`, a dead letter that
    could not be produced for a reason other than an outage, an error of its `start()`, or a bug in
    the runtime). Its uncommitted records are redelivered to the consumer group when it runs again:
    a `ProcessorSupervisor` restarts it alone, with backoff.
    """

    code = "processor_crashed"

    def __init__(self, processor: str, message: str) -> None:
        super().__init__(f"processor {processor!r} crashed: {message}")
        self.processor = processor


class SinkUnavailable(StoreUnavailable):
    """A store, broker or other resource the processor needs cannot be used right now, and waiting
    cures it (connection refused, timeout, a server answering 503, a lock held elsewhere): the
    processors' `core.errors.StoreUnavailable`.

    Raise it (`raise SinkUnavailable("ClickHouse insert failed: ...") from exc`) from `process` when
    the failure is about the resource, not about the records: the runtime retries the batch without
    limit (capped backoff, rate-limited warnings) and never dead-letters or skips for it. A store
    adapter's own `StoreUnavailable` (e.g. `TranscriptUnavailable`) needs no wrapping, and errors
    of the same nature that libraries raise (ConnectionError, TimeoutError, asyncpg and redis
    connection errors, ...) are recognised without it: `streams.runtime.outages.is_outage`.
    """

    code = "sink_unavailable"


class ProcessorCannotRun(MemstreamError):
    """The processor cannot run in this process at all (e.g. it needs the node's journal and was
    started as a separate worker): raised by `start()`, it is not restarted (restarting cannot help);
    the message says what to do instead."""

    code = "processor_cannot_run"


class BatchAbandoned(MemstreamError):
    """The runtime is stopping while the batch was failing or waiting: it is left uncommitted (and
    redelivered later), neither retried further nor dead-lettered."""

    code = "batch_abandoned"


class DeadLetterLimitExceeded(MemstreamError):
    """More records were dead-lettered in the window than the limit allows: rather than
    dead-lettering a whole bad deploy, the processor stops (the record was not dead-lettered)."""

    code = "dead_letter_limit_exceeded"


class DeadLetterUnavailable(SinkUnavailable):
    """A dead-letter record was not acknowledged by the broker in time (an outage: retried)."""

    code = "dead_letter_unavailable"


class UnknownProcessor(MemstreamError):
    """No processor of that name is registered. `available` lists the registered names."""

    code = "unknown_processor"

    def __init__(self, name: str, available: list[str]) -> None:
        names = ", ".join(sorted(available)) or "(none registered yet)"
        super().__init__(f"unknown processor {name!r}; registered processors: {names}")
        self.name = name
        self.available = sorted(available)
