"""A faust consumer that commits only offsets the runtime has marked processed.

Faust commits the offsets of "acked" messages, and faust itself acks some messages that no
processor saw: a stream acks the messages it skips while flow control is suspended or that carry a
stale rebalance generation. If such an ack lands right after the last processed offset of a
partition, faust commits past a record that was never processed. `CommitGuardConsumer.ack`
ignores every ack of a message the runtime did not `mark_processed` first, so a committed offset
always means "every record before it in this partition was processed".
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP, Message

log = logging.getLogger("memstream.runtime")


class CommitGuardConsumer(faust_aiokafka.Consumer):
    """The aiokafka-driver consumer of faust, with acks limited to processed messages."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self._processed: set[tuple[TP, int]] = set()

    def mark_processed(self, messages: Iterable[Message]) -> None:
        """Allow the next ack of each of `messages` (their effects are durable)."""
        self._processed.update((message.tp, message.offset) for message in messages)

    def ack(self, message: Message) -> bool:
        key = (message.tp, message.offset)
        if key not in self._processed:
            log.debug("ignored faust's ack of unprocessed %s@%d", message.tp, message.offset)
            return False
        self._processed.discard(key)
        return bool(super().ack(message))


class CommitGuardTransport(faust_aiokafka.Transport):
    """faust's aiokafka transport building `CommitGuardConsumer`s."""

    Consumer = CommitGuardConsumer
