"""The processor contract: Record, InvalidMessage, TransformProcessor, group ids (pure)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest

from core.config import Settings
from streams.runtime.processor import InvalidMessage, Record, TransformProcessor, group_id


def record(offset: int, value: bytes | None) -> Record:
    return Record(
        "p.journal.messages", 2, offset, b"th-1", value, (("message_id", b"m1"),), 1_700_000_000_000
    )


class ListSink:
    def __init__(self) -> None:
        self.writes: list[list[int]] = []
        self.started = self.stopped = False

    async def write(self, items: Sequence[int]) -> None:
        self.writes.append(list(items))

    async def start(self) -> None:
        self.started = True

    async def stop(self) -> None:
        self.stopped = True


def parse(r: Record) -> int | None:
    if r.value is None:
        return None  # tombstone: nothing to write
    data: dict[str, Any] = json.loads(r.value)
    return int(data["id"])


def test_record_position_and_headers() -> None:
    r = record(7, b"{}")
    assert r.position == ("p.journal.messages", 2, 7)
    assert r.header("message_id") == b"m1" and r.header("other") is None


def test_invalid_message_needs_a_reason_and_reports_its_cause() -> None:
    with pytest.raises(ValueError):
        InvalidMessage(record(1, b""), " ")
    try:
        try:
            json.loads(b"{")
        except ValueError as exc:
            raise InvalidMessage(record(1, b"{"), "not JSON") from exc
    except InvalidMessage as invalid:
        assert isinstance(invalid.error, json.JSONDecodeError)
        assert "p.journal.messages[2]@1" in str(invalid)
    assert isinstance(InvalidMessage(record(1, b""), "x").error, InvalidMessage)


async def test_transform_processor_writes_one_batch_and_skips_none() -> None:
    sink = ListSink()
    processor = TransformProcessor("ids", ["journal.messages"], parse, sink, invalid_errors=(ValueError,))
    await processor.start()
    await processor.process([record(0, b'{"id": 1}'), record(1, None), record(2, b'{"id": 3}')])
    await processor.process([record(3, None)])  # nothing to write: no sink call
    await processor.stop()
    assert sink.writes == [[1, 3]]
    assert sink.started and sink.stopped
    assert processor.source_topics == ("journal.messages",)


def test_transform_errors_become_invalid_message_for_that_record() -> None:
    processor = TransformProcessor(
        "ids", ["journal.messages"], parse, ListSink(), invalid_errors=(ValueError,)
    )
    with pytest.raises(InvalidMessage) as raised:
        processor.items([record(0, b'{"id": 1}'), record(1, b"not json")])
    assert raised.value.record.offset == 1
    assert isinstance(raised.value.error, ValueError)
    with pytest.raises(KeyError):  # not declared invalid: stays a (transient) error
        processor.items([record(0, b"{}")])


def test_group_id_is_prefixed() -> None:
    assert group_id("summarizer", Settings(topic_prefix="t1.")) == "t1.memstream.summarizer"
    assert group_id("summarizer", Settings()) == "memstream.summarizer"
