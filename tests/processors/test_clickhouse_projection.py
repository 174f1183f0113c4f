"""clickhouse-projection: decoding records into rows (pure), and what `process` raises while
ClickHouse is unavailable (with the in-memory store and `Outage`: the real store is covered in the broker
test; the runtime's waiting is tested in tests/streams/runtime/test_batch.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from core.journal.models import ToolCall
from core.stores.transcripts import TranscriptRow, TranscriptUnavailable
from processors.clickhouse_projection import (
    NAME,
    ClickHouseProjection,
    decode,
    rows,
)
from streams.codecs.errors import InvalidEvent, UnsupportedSchemaVersion
from streams.runtime.outages import is_outage
from streams.runtime.processor import InvalidMessage
from tests.fakes.outage import Outage
from tests.fakes.transcripts import InMemoryTranscriptStore
from tests.processors.transcript_support import message, raw_record, record_of, tool_result


def test_decode_flattens_a_message_into_a_row() -> None:
    msg = message(
        "th-1",
        3,
        "calling",
        role="assistant",
        reasoning="why",
        tool_call=ToolCall(id="call-1", name="search", arguments='{"q": "x"}'),
        seq=42,
    )
    row = decode(record_of(msg, 7))
    assert row == TranscriptRow(
        environment="test",
        account_id="acme",
        agent_id="bot",
        user_id="alice",
        thread_id="th-1",
        message_id="th-1-3",
        offset=3,
        seq=42,
        role="assistant",
        content="calling",
        reasoning="why",
        tool_call_id="call-1",
        tool_name="search",
        tool_arguments='{"q": "x"}',
        tool_result=None,
        created_at=msg.created_at,
        token_count=1,
        terms=("call",),  # the stem of its content
    )
    result = decode(record_of(tool_result("th-1", 4, "call-1", "done"), 8))
    assert (result.role, result.tool_call_id, result.tool_name, result.tool_result, result.terms) == (
        "tool",
        "call-1",
        None,
        "done",
        (),  # tool messages are never search results: no terms
    )
    plain = decode(record_of(message("th-1", 0, "hi", user_id=None), 1))
    assert (plain.user_id, plain.tool_call_id, plain.reasoning) == (None, None, None)


@pytest.mark.parametrize(
    ("key", "value", "reason", "cause"),
    [
        (b"th-1", None, "no value", InvalidEvent),
        (b"th-1", b"not json", "not JSON", InvalidEvent),
        (b"th-1", b'{"schema_version": 2}', "schema_version 2", UnsupportedSchemaVersion),
        (b"th-1", b'{"schema_version": 1, "role": "user"}', "invalid at", InvalidEvent),
    ],
)
def test_undecodable_records_are_invalid(key: bytes, value: bytes | None, reason: str, cause: type) -> None:
    record = raw_record(key, value, 5)
    with pytest.raises(InvalidMessage, match=reason) as info:
        decode(record)
    assert info.value.record is record
    assert isinstance(info.value.error, cause)


def test_a_key_that_is_not_the_thread_is_invalid() -> None:
    good = record_of(message("th-1", 0, "hi"), 0)
    bad = raw_record(b"th-2", good.value, 1)
    with pytest.raises(InvalidMessage, match="not the message's thread_id"):
        decode(bad)


def test_rows_keep_record_order_and_stop_at_the_first_bad_record() -> None:
    batch = [record_of(message("a", i, f"m{i}"), i) for i in range(3)]
    assert [r.offset for r in rows(batch)] == [0, 1, 2]
    poisoned = [*batch[:2], raw_record(b"a", b"{}", 9), batch[2]]
    with pytest.raises(InvalidMessage) as info:
        rows(poisoned)
    assert info.value.record.offset == 9


def refused(what: str) -> TranscriptUnavailable:
    return TranscriptUnavailable(f"{what}: connection refused")


async def test_an_unavailable_clickhouse_raises_an_outage_and_nothing_is_lost() -> None:
    store = InMemoryTranscriptStore()
    down = Outage(store, methods={"insert"}, error=lambda: refused("insert"), times=2)
    processor = ClickHouseProjection(down.proxy)
    batch = [record_of(message("a", i, f"m{i}"), i) for i in range(4)]
    await processor.start()
    for _ in range(2):  # the runtime retries the same batch without limit
        with pytest.raises(TranscriptUnavailable, match="insert: connection refused") as raised:
            await processor.process(batch)
        assert is_outage(raised.value)
    await processor.process(batch)
    assert [r.offset for r in store.rows] == [0, 1, 2, 3]


async def test_schema_is_created_once_even_when_clickhouse_is_down_at_start() -> None:
    store = InMemoryTranscriptStore()
    table = await store.create_rebuild_table()
    down = Outage(store, methods={"ensure_schema"}, error=lambda: refused("schema"), times=2)
    processor = ClickHouseProjection(down.proxy, table=table)
    await processor.start()  # does not raise: the first batch creates it
    with pytest.raises(TranscriptUnavailable):
        await processor.process([record_of(message("a", 0, "hi"), 0)])
    await processor.process([record_of(message("a", 0, "hi"), 0)])
    await processor.process([record_of(message("a", 1, "ho"), 1)])
    assert down.calls["ensure_schema"] == 3
    assert [r.offset for r in store.rebuild_tables[table]] == [0, 1] and store.rows == []


async def test_other_errors_go_to_the_runtime_as_they_are() -> None:
    broken = Outage(
        InMemoryTranscriptStore(), methods={"insert"}, error=lambda: RuntimeError("Code: 62. Syntax error")
    )
    processor = ClickHouseProjection(broken.proxy)
    with pytest.raises(RuntimeError, match="Syntax") as raised:
        await processor.process([record_of(message("a", 0, "hi"), 0)])
    assert not is_outage(raised.value)


async def test_a_bad_record_is_rejected_before_anything_is_written() -> None:
    store = InMemoryTranscriptStore()
    watched = Outage(store, methods={"insert"}, error=AssertionError("an insert before every record decoded"))
    processor = ClickHouseProjection(watched.proxy)
    with pytest.raises(InvalidMessage):
        await processor.process([record_of(message("a", 0, "hi"), 0), raw_record(b"a", b"[]", 1)])
    assert store.rows == [] and watched.calls["insert"] == 0


async def test_identity_batching_and_closing() -> None:
    store = InMemoryTranscriptStore()
    processor = ClickHouseProjection(store)
    assert (processor.name, processor.source_topics) == (NAME, ("journal.messages", "journal.deletions"))
    assert processor.batch_size is not None and processor.batch_size >= 1000
    assert processor.batch_wait_s is not None and processor.batch_wait_s <= 0.5
    await processor.stop()
    assert store.closed
    kept = InMemoryTranscriptStore()
    shared = ClickHouseProjection(kept, close_store=False)
    await shared.stop()
    assert not kept.closed


def test_a_shard_header_that_is_not_the_messages_shard_is_invalid() -> None:
    sharded = record_of(message("th-1", 0, "hi", shard=2), 0)
    assert decode(sharded).shard == 2  # no stamp headers: nothing to disagree with
    stamped = replace(sharded, headers=(*sharded.headers, ("shard", b"2")))
    assert decode(stamped).shard == 2
    wrong = replace(sharded, headers=(*sharded.headers, ("shard", b"1")))
    with pytest.raises(InvalidMessage, match="shard header does not name the message's shard 2"):
        decode(wrong)
