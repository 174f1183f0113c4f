"""A processor's output topic (`TopicOutput`): the publisher's life cycle and the outage it
raises when the broker does not confirm a record."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import pytest
from confluent_kafka import KafkaError

from core.config import Settings
from streams.output import TopicOutput
from streams.producer import (
    BatchPublisher,
    DeliveryAborted,
    DeliveryFailure,
    OutgoingRecord,
    RecordsNotConfirmed,
)
from streams.runtime.errors import SinkUnavailable

LOG = logging.getLogger("test.output")
RECORDS = [OutgoingRecord(b"k", b"v")]


class NotConfirmed(SinkUnavailable):
    code = "test_not_confirmed"


class RecordingPublisher(BatchPublisher):
    """A publisher that records what it is asked and fails with `failure` (no broker)."""

    def __init__(self, settings: Settings, failure: Exception | None = None) -> None:
        super().__init__(settings, "t.out", client_id="test", logger=LOG)
        self.failure = failure
        self.published: list[list[OutgoingRecord]] = []
        self.closed = 0

    async def publish(self, records: Sequence[OutgoingRecord]) -> None:
        if self._abort_reason is not None:
            raise DeliveryAborted(self._abort_reason, len(records))
        if self.failure is not None:
            raise self.failure
        self.published.append(list(records))

    def close(self) -> None:
        self.closed += 1


@pytest.fixture
def settings_(tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path / "data", environment="test")


def output(settings: Settings, publisher: BatchPublisher | None) -> TopicOutput:
    return TopicOutput(
        settings, "t.out", client_id="test", logger=LOG, not_confirmed=NotConfirmed, publisher=publisher
    )


async def test_send_returns_once_the_publisher_confirmed(settings_: Settings) -> None:
    publisher = RecordingPublisher(settings_)
    out = output(settings_, publisher)
    out.start()
    await out.send(RECORDS, what="records")
    assert publisher.published == [RECORDS]
    out.close()
    assert publisher.closed == 1


async def test_unconfirmed_records_raise_the_owners_outage(settings_: Settings) -> None:
    failure = RecordsNotConfirmed("t.out", 1, [DeliveryFailure(KafkaError(KafkaError._MSG_TIMED_OUT), b"k")])
    out = output(settings_, RecordingPublisher(settings_, failure))
    out.start()
    with pytest.raises(NotConfirmed, match=r"^compaction requests not confirmed: 1 of 1 records") as raised:
        await out.send(RECORDS, what="compaction requests")
    assert raised.value.__cause__ is failure
    assert raised.value.code == "test_not_confirmed"


async def test_stopping_aborts_sends_before_and_after_start(settings_: Settings) -> None:
    publisher = RecordingPublisher(settings_)
    out = output(settings_, publisher)
    out.stopping("the test is stopping")
    out.start()  # the stop came first: the publisher is aborted as it is taken
    with pytest.raises(DeliveryAborted, match="the test is stopping"):
        await out.send(RECORDS, what="records")
    started = output(settings_, RecordingPublisher(settings_))
    started.start()
    started.stopping("later")
    with pytest.raises(DeliveryAborted, match="later"):
        await started.send(RECORDS, what="records")


async def test_start_builds_a_publisher_for_the_topic_without_io(settings_: Settings) -> None:
    out = output(settings_, None)
    with pytest.raises(RuntimeError, match="not started"):
        await out.send(RECORDS, what="records")
    out.start()
    assert out.publisher is not None and out.publisher.topic == "t.out"
    out.close()  # no producer was made: nothing to discard
