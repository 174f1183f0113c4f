"""A processor's output topic: the produce step of `thresholds` and `flush`.

`TopicOutput.send(records)` returns only once the broker confirmed every record (the publisher's
idempotent produce-and-confirm), so the processor commits its input offsets only after its output
is durable. A record the broker did not confirm raises the owner's `not_confirmed` error, a
`SinkUnavailable` (an outage: the runtime retries the batch without limit), caused by the
`RecordsNotConfirmed`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from core.config import Settings
from streams.producer import BatchPublisher, OutgoingRecord, RecordsNotConfirmed
from streams.runtime.errors import SinkUnavailable


class TopicOutput:
    """The output topic `topic` (broker-side name) of one processor: the publisher is built in
    `start()` unless given, aborted by `stopping()` (a send waiting on the broker gives up at once,
    and every later one: final), closed by `close()`; `send()` returns once the broker confirmed
    every record, else raises `not_confirmed` (an outage). Construction does no I/O."""

    def __init__(
        self,
        settings: Settings,
        topic: str,
        *,
        client_id: str,
        logger: logging.Logger,
        not_confirmed: type[SinkUnavailable],
        publisher: BatchPublisher | None = None,
    ) -> None:
        self.settings = settings
        self.topic = topic
        self.client_id = client_id
        self.not_confirmed = not_confirmed
        self.publisher = publisher
        self._log = logger
        self._stopping: str | None = None

    def start(self) -> None:
        """Build the publisher (when not given); aborted at once when `stopping` came first."""
        if self.publisher is None:
            self.publisher = BatchPublisher(
                self.settings, self.topic, client_id=self.client_id, logger=self._log
            )
        if self._stopping is not None:
            self.publisher.abort(self._stopping)

    def stopping(self, reason: str) -> None:
        """The owner stops: a send waiting on the broker gives up with `reason`, and every later one."""
        self._stopping = reason
        if self.publisher is not None:
            self.publisher.abort(reason)

    def close(self) -> None:
        """Discard the publisher's producer (what it still queued is purged)."""
        if self.publisher is not None:
            self.publisher.close()

    async def send(self, records: Sequence[OutgoingRecord], *, what: str) -> None:
        """Produce `records` in order; return once every one is confirmed. `not_confirmed`
        ("`what` not confirmed: ...") when the broker did not confirm them all; `DeliveryAborted`
        after `stopping`; RuntimeError before `start`."""
        if self.publisher is None:
            raise RuntimeError(f"the output to {self.topic} was not started")
        try:
            await self.publisher.publish(records)
        except RecordsNotConfirmed as exc:
            raise self.not_confirmed(f"{what} not confirmed: {exc.message}") from exc
