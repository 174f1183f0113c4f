"""A faust consumer that commits only offsets the runtime has marked processed.

Faust turns "acked" offsets into the offsets it commits, and faust itself acks messages that no
processor saw: a stream acks the messages it skips while flow control is suspended or that carry a
stale rebalance generation, and once the batch loop's `noack_take` generator is closed (after a
crash, or while stopping) the stream's background drainer goes back to acking every message it
still pulls from the topic. That last path runs in faust's Cython stream iterator, which writes
the consumer's ack bookkeeping directly instead of calling `Consumer.ack`, so guarding `ack` alone
is not enough.

`CommitGuardConsumer` therefore enforces the rule where faust turns acks into a commit offset:
`_new_offset(tp)` first drops every acked offset the runtime did not `mark_processed`, whichever
path acked it, then lets faust find the first run of consecutive offsets (and skipped offset
gaps) as usual. `ack` still refuses unprocessed messages, so they are not even marked acked on
the ordinary path. A committed offset thus always means "every record before it in this
partition was processed".

Consumers never create topics. aiokafka asks for metadata with `allow_auto_topic_creation` set
(it has no option for it), and a broker that creates topics on demand (Tansu always does, with 4
partitions) then brings a lost topic back on a consumer's metadata refresh - before the node
applies topics.yaml, so with a partition count topics.yaml does not declare, and without the node
learning that the topic is new. `forbid_topic_creation()` makes aiokafka's metadata requests say
"do not create" (for the whole process: memstream never lets a client create a topic, topics come
from `streams.admin.apply_topics` only); every consumer this module builds calls it first.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import aiokafka.client  # type: ignore[import-untyped]
from aiokafka.protocol.metadata import MetadataRequest  # type: ignore[import-untyped]
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP, Message

log = logging.getLogger("memstream.runtime")


FETCH_MAX_WAIT_MS = 100
"""How long a fetch may wait at the broker for data. faust hard-codes 1,500 ms for its worker
consumers; on Tansu a fetch waits out most of that even when records arrive, which measured as
~410 ms median delivery latency (4 ms at 10 ms wait). 100 ms keeps idle polling cheap."""


class _MetadataRequestNoCreation(MetadataRequest):  # type: ignore[misc]
    """aiokafka's metadata request, asking the broker not to create the topics it names unless the
    caller says otherwise."""

    def __init__(
        self, topics: list[str] | None = None, allow_auto_topic_creation: bool | None = None
    ) -> None:
        allow = False if allow_auto_topic_creation is None else allow_auto_topic_creation
        super().__init__(topics, allow)


def forbid_topic_creation() -> None:
    """From now on, aiokafka's metadata requests in this process never ask the broker to create a
    missing topic (module doc). Idempotent."""
    aiokafka.client.MetadataRequest = _MetadataRequestNoCreation


class LowLatencyConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    """faust's aiokafka consumer thread, with `FETCH_MAX_WAIT_MS` instead of its fixed 1,500 ms, whose
    consumer never creates topics (`forbid_topic_creation`)."""

    def _create_worker_consumer(self, transport: faust_aiokafka.Transport) -> Any:
        forbid_topic_creation()
        consumer = super()._create_worker_consumer(transport)
        consumer._fetch_max_wait_ms = FETCH_MAX_WAIT_MS  # read when the consumer starts its fetcher
        return consumer


class CommitGuardConsumer(faust_aiokafka.Consumer):
    """The aiokafka-driver consumer of faust, committing only processed offsets (module doc)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self._processed: dict[TP, set[int]] = {}

    def _new_consumer_thread(self) -> faust_aiokafka.AIOKafkaConsumerThread:
        return LowLatencyConsumerThread(self, loop=self.loop, beacon=self.beacon)

    def mark_processed(self, messages: Iterable[Message]) -> None:
        """Allow `messages` to be acked and committed (their effects are durable)."""
        for message in messages:
            self._processed.setdefault(message.tp, set()).add(message.offset)

    def ack(self, message: Message) -> bool:
        if message.offset not in self._processed.get(message.tp, ()):
            log.debug("ignored faust's ack of unprocessed %s@%d", message.tp, message.offset)
            return False
        return bool(super().ack(message))

    def _new_offset(self, tp: TP) -> int | None:
        """The offset to commit for `tp`, from processed offsets only (None: nothing to commit)."""
        processed = self._processed.get(tp, set())
        acked = self._acked[tp]
        unprocessed = [offset for offset in acked if offset not in processed]
        if unprocessed:
            log.debug("dropped faust's acks of unprocessed %s offsets %s", tp, unprocessed)
            acked[:] = [offset for offset in acked if offset in processed]
            self._acked_index[tp].difference_update(unprocessed)
        offset: int | None = super()._new_offset(tp)
        if offset is not None and processed:
            self._processed[tp] = {done for done in processed if done >= offset}
        return offset

    async def on_partitions_revoked(self, revoked: set[TP]) -> None:
        for tp in revoked:
            self._processed.pop(tp, None)
        await super().on_partitions_revoked(revoked)


class CommitGuardTransport(faust_aiokafka.Transport):
    """faust's aiokafka transport building `CommitGuardConsumer`s."""

    Consumer = CommitGuardConsumer
