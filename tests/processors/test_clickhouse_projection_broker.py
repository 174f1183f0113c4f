"""clickhouse-projection on the real broker and real ClickHouse (chdb): journal records become
rows, redelivery and replay never duplicate reads, an outage of ClickHouse is waited out."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from core.config import Settings
from core.journal.models import Message, ToolCall
from core.stores.transcripts import TranscriptScope, TranscriptUnavailable
from processors.clickhouse_projection import NAME, ClickHouseProjection
from sinks.clickhouse.store import ClickHouseTranscriptStore
from streams.admin import apply_topics
from streams.codecs import journal_messages
from streams.runtime import RuntimeOptions
from streams.runtime.processor import Record
from streams.topics import TopicRegistry, default_registry
from tests.fakes.outage import Outage
from tests.processors.runtime_support import (
    Outgoing,
    broker_settings,
    committed_total,
    dead_letters,
    produce,
    run_until,
    short_options,
)
from tests.processors.transcript_support import message, tool_result

REPLAY = f"{NAME}-replay"
SOURCE = "journal.messages"
SCOPE = TranscriptScope(environment="test", account_id="acme", agent_id="bot", user_id="alice")


@pytest.fixture
def settings_(broker: str, topic_prefix: str, tmp_path: Path) -> Settings:
    return broker_settings(broker, topic_prefix, tmp_path)


@pytest.fixture
def options(request: pytest.FixtureRequest) -> RuntimeOptions:
    """Few attempts, so that only the processor's own wait can carry a batch through an outage."""
    return short_options(request, max_attempts=2)


@pytest.fixture
def registry(settings_: Settings) -> TopicRegistry:
    reg = default_registry().with_dead_letter(REPLAY)
    apply_topics(settings_, reg, topics=[reg.get(SOURCE), reg.dlq_topic(NAME), reg.dlq_topic(REPLAY)])
    return reg


def encoded(messages: Sequence[Message]) -> list[Outgoing]:
    return [(e.key, e.value) for e in map(journal_messages.encode, messages)]


async def project(
    settings: Settings,
    options: RuntimeOptions,
    registry: TopicRegistry,
    processor: ClickHouseProjection,
    total: int,
    timeout_s: float = 90,
) -> None:
    """Run `processor` until its group committed `total` records."""
    await run_until(
        settings,
        options,
        registry,
        processor,
        lambda: committed_total(settings, processor.name, SOURCE) >= total,
        timeout_s,
    )


class BatchRecording(ClickHouseProjection):
    """Records the size of every batch the runtime hands over."""

    sizes: list[int]

    async def process(self, batch: Sequence[Record]) -> None:
        self.sizes.append(len(batch))
        await super().process(batch)


def conversation(threads: int, per_thread: int) -> list[Message]:
    out: list[Message] = []
    seq = 0
    for t in range(threads):
        for o in range(per_thread):
            seq += 1
            role = "user" if o % 2 == 0 else "assistant"
            out.append(
                message(f"th-{t}", o, f"thread {t} message {o} about topic{t % 3}", seq=seq, role=role)
            )
    return out


async def test_journal_to_rows_then_replay_adds_no_duplicates(
    settings_: Settings,
    options: RuntimeOptions,
    registry: TopicRegistry,
    transcript_store: ClickHouseTranscriptStore,
    chdb_client: Any,
) -> None:
    messages = [
        *conversation(threads=4, per_thread=25),
        message(
            "th-call", 0, "", role="assistant", tool_call=ToolCall(id="c-1", name="fetch", arguments="{}")
        ),
        tool_result("th-call", 1, "c-1", "x" * 50_000),
        message("th-other", 0, "thread 0 message 0 about topic0", account_id="globex"),
    ]
    records = encoded(messages)
    records.insert(10, (b"th-0", b"not a journal message"))  # dead-lettered, the rest goes on
    produce(settings_, SOURCE, records)
    produce(settings_, SOURCE, records[:30])  # the relay published some again (at-least-once)
    total = len(records) + 30

    live = BatchRecording(transcript_store, close_store=False, batch_size=40)
    live.sizes = []
    await project(settings_, options, registry, live, total)
    # the processor's own batch size, not the run's (500)
    assert max(live.sizes) <= 40 and sum(live.sizes) >= total
    assert await transcript_store.row_count() == len(messages)
    counts = await transcript_store.thread_counts("test")
    assert {(c.account_id, c.thread_id): (c.messages, c.max_offset) for c in counts} == {
        **{("acme", f"th-{t}"): (25, 24) for t in range(4)},
        ("acme", "th-call"): (2, 1),
        ("globex", "th-other"): (1, 0),
    }
    hits = await transcript_store.search(SCOPE, "topic1", limit=50)
    assert sorted((h.thread_id, h.offset) for h in hits) == [("th-1", o) for o in range(25)]
    [info] = await transcript_store.tool_call(SCOPE, "c-1")
    assert (info.tool_name, info.call_offset, info.result_offset, info.result_bytes) == (
        "fetch",
        0,
        1,
        50_000,
    )
    dead = dead_letters(settings_, NAME)  # the bad record was published twice too
    assert [(d["value_text"], d["processor"]) for d in dead] == [("not a journal message", NAME)] * 2
    table = f"{transcript_store.database}.messages"

    def raw_rows() -> int:
        return int(chdb_client.query(f"SELECT count() FROM {table}").result_rows[0][0])

    # replay from the earliest offset (a new group) into the same live table: reads unchanged.
    # Merges stopped: every copy the replay inserts stays countable until the check below.
    chdb_client.command(f"SYSTEM STOP MERGES {table}")
    try:
        raw_before = raw_rows()
        replay = BatchRecording(transcript_store, name=REPLAY, close_store=False)
        replay.sizes = []
        await project(settings_, options, registry, replay, total)
        assert sum(replay.sizes) >= total  # every record was delivered again ...
        assert raw_rows() - raw_before >= len(messages)  # ... and every message inserted again
        # the copies are all still there, unmerged: every read counts each message once
        assert await transcript_store.row_count() == len(messages)
        assert await transcript_store.thread_counts("test") == counts
        again = await transcript_store.search(SCOPE, "topic1", limit=50)
        assert sorted((h.thread_id, h.offset) for h in again) == [("th-1", o) for o in range(25)]
        assert [i.result_bytes for i in await transcript_store.tool_call(SCOPE, "c-1")] == [50_000]
    finally:
        chdb_client.command(f"SYSTEM START MERGES {table}")


async def test_an_outage_of_clickhouse_is_waited_out_without_dead_letters(
    settings_: Settings,
    options: RuntimeOptions,
    registry: TopicRegistry,
    transcript_store: ClickHouseTranscriptStore,
) -> None:
    outage = Outage(
        transcript_store,
        methods={"ensure_schema", "insert"},
        error=lambda: TranscriptUnavailable("ClickHouse insert failed: connection refused (test outage)"),
    )
    processor = ClickHouseProjection(outage.proxy, close_store=False, batch_size=25)
    first = conversation(threads=3, per_thread=20)
    produce(settings_, SOURCE, encoded(first))
    later = [message(f"late-{i}", 0, f"written during the outage {i}", seq=1000 + i) for i in range(10)]

    async def outage_then_recovery() -> None:
        await asyncio.sleep(1.0)  # the processor joins and fails for a while ...
        produce(settings_, SOURCE, encoded(later))  # ... while more messages arrive
        await asyncio.sleep(4.0)  # longer than the runtime's own retries (2 attempts) would last
        assert await transcript_store.row_count() == 0
        outage.restore()

    recovery = asyncio.create_task(outage_then_recovery())
    await project(settings_, options, registry, processor, len(first) + len(later))
    await recovery
    assert outage.refused >= 10  # waited out by the runtime, far beyond its max_attempts
    assert await transcript_store.row_count() == len(first) + len(later)
    assert dead_letters(settings_, NAME) == []
