"""transcript-vectors on the real broker, real ClickHouse (chdb) and the real offline MiniLM:
journal records become one vector per user/assistant message with text, and a redelivery or a
replay (a second group over the same topic) writes the same vectors again without any read
seeing two; a tombstone on `journal.deletions` deletes the thread's vectors, and a replay after it
(a new group, the register's tombstones loaded first) does not bring them back, while the thread
id used again keeps its new vector."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from core.config import Settings
from core.journal.models import ToolCall
from core.stores.deletions import Tombstone
from core.stores.transcripts import TranscriptScope
from processors.clickhouse_projection import project
from processors.transcript_vectors import NAME, TranscriptVectors
from sinks.clickhouse.store import ClickHouseTranscriptStore
from sinks.clickhouse.vectors import ClickHouseMessageVectors
from sinks.embeddings.minilm import OfflineMiniLM
from streams.admin import apply_topics
from streams.codecs import journal_deletions, journal_messages
from streams.runtime import RuntimeOptions
from streams.topics import TopicRegistry, default_registry
from tests.processors.runtime_support import (
    broker_settings,
    committed_total,
    dead_letters,
    produce,
    run_until,
    short_options,
)
from tests.processors.test_clickhouse_projection_deletions import Register
from tests.processors.transcript_support import message, tool_result

REPLAY = f"{NAME}-replay"
SOURCE = "journal.messages"
DELETIONS = journal_deletions.TOPIC
SCOPE = TranscriptScope(environment="test", account_id="acme", agent_id="bot", user_id="alice")


@pytest.fixture
def settings_(broker: str, topic_prefix: str, tmp_path: Path) -> Settings:
    return broker_settings(broker, topic_prefix, tmp_path)


@pytest.fixture
def options(request: pytest.FixtureRequest) -> RuntimeOptions:
    return short_options(request, max_attempts=2)


@pytest.fixture
def registry(settings_: Settings) -> TopicRegistry:
    reg = default_registry().with_dead_letter(REPLAY)
    topics = [reg.get(SOURCE), reg.get(DELETIONS), reg.dlq_topic(NAME), reg.dlq_topic(REPLAY)]
    apply_topics(settings_, reg, topics=topics)
    return reg


async def test_journal_to_vectors_then_replay_adds_no_duplicates(
    settings_: Settings,
    options: RuntimeOptions,
    registry: TopicRegistry,
    transcript_store: ClickHouseTranscriptStore,
    embedder: OfflineMiniLM,
    chdb_client: Any,
) -> None:
    texts = [f"Caroline talked about topic {i} at the support group" for i in range(12)]
    messages = [
        *(
            message("th-1", i, text, role="user" if i % 2 == 0 else "assistant")
            for i, text in enumerate(texts)
        ),
        message("th-1", 12, "", role="assistant", tool_call=ToolCall(id="c-1", name="f", arguments="{}")),
        tool_result("th-1", 13, "c-1", "support group tool output"),
        message("th-1", 14, "system text about the support group", role="system"),
    ]
    await transcript_store.insert(project(messages, {}))  # the messages' rows, as projected
    records = [(e.key, e.value) for e in map(journal_messages.encode, messages)]
    records.insert(3, (b"th-1", b"not a journal message"))  # dead-lettered, the rest goes on
    produce(settings_, SOURCE, records)
    produce(settings_, SOURCE, records[:5])  # the relay published some again (at-least-once)
    total = len(records) + 5
    vectors = ClickHouseMessageVectors(transcript_store)
    table = f"{transcript_store.database}.message_vectors"

    def stored() -> list[tuple[int, int]]:
        rows = chdb_client.query(f"SELECT offset, count() FROM {table} GROUP BY offset ORDER BY offset")
        return [(int(r[0]), int(r[1])) for r in rows.result_rows]

    live = TranscriptVectors(vectors, embedder, batch_size=5)
    await run_until(
        settings_, options, registry, live, lambda: committed_total(settings_, NAME, SOURCE) >= total
    )
    assert [offset for offset, _ in stored()] == list(range(12))  # no tool, empty or system message
    [own] = await embedder.embed([texts[7]])

    async def cosines() -> dict[int, float | None]:
        found = await vectors.candidates(
            SCOPE, "support group", model=embedder.model_id, query_vector=own, limit=50
        )
        return {c.hit.offset: c.cosine for c in found}

    by_offset = await cosines()
    assert sorted(by_offset) == list(range(12))
    assert by_offset[7] == pytest.approx(1.0, abs=0.005)  # the stored vector is its message's own
    assert all(c is not None and c < 0.999 for o, c in by_offset.items() if o != 7)
    dead = dead_letters(settings_, NAME)
    assert [d["value_text"] for d in dead] == ["not a journal message"] * 2

    # replay from the earliest offset (a new group): every vector inserted again, no read sees two
    chdb_client.command(f"SYSTEM STOP MERGES {table}")
    try:
        replay = TranscriptVectors(vectors, embedder, name=REPLAY)
        await run_until(
            settings_, options, registry, replay, lambda: committed_total(settings_, REPLAY, SOURCE) >= total
        )
        assert all(copies >= 2 for _, copies in stored())  # the copies are there, unmerged
        assert await cosines() == by_offset  # each message once, the same vectors
    finally:
        chdb_client.command(f"SYSTEM START MERGES {table}")


async def test_a_deleted_threads_vectors_go_and_a_replay_does_not_bring_them_back(
    settings_: Settings,
    options: RuntimeOptions,
    registry: TopicRegistry,
    transcript_store: ClickHouseTranscriptStore,
    embedder: OfflineMiniLM,
    chdb_client: Any,
) -> None:
    old = [message("th-1", i, f"old kiwi {i}", seq=i + 1) for i in range(3)]
    other = message("th-2", 0, "other kiwi", seq=4)
    again = message("th-1", 3, "the thread id used again", seq=5)
    produce(settings_, SOURCE, [(e.key, e.value) for e in map(journal_messages.encode, [*old, other])])
    vectors = ClickHouseMessageVectors(transcript_store)
    table = f"{transcript_store.database}.message_vectors"

    def stored() -> list[tuple[str, int]]:
        rows = chdb_client.query(f"SELECT DISTINCT thread_id, seq FROM {table} ORDER BY thread_id, seq")
        return [(str(r[0]), int(r[1])) for r in rows.result_rows]

    live = TranscriptVectors(vectors, embedder, tombstones=Register([]))
    await run_until(settings_, options, registry, live, lambda: committed_total(settings_, NAME, SOURCE) >= 4)
    assert stored() == [("th-1", 1), ("th-1", 2), ("th-1", 3), ("th-2", 4)]

    tombstone = Tombstone("test", "acme", "th-1", 3)
    event = journal_deletions.encode(1, tombstone, datetime(2026, 12, 2, tzinfo=UTC))
    produce(settings_, DELETIONS, [(event.key, event.value)])
    produce(settings_, SOURCE, [(e.key, e.value) for e in map(journal_messages.encode, [again])])
    live = TranscriptVectors(vectors, embedder, tombstones=Register([]))
    await run_until(
        settings_,
        options,
        registry,
        live,
        lambda: (
            committed_total(settings_, NAME, DELETIONS) >= 1 and committed_total(settings_, NAME, SOURCE) >= 5
        ),
    )
    assert stored() == [("th-1", 5), ("th-2", 4)]

    # a replay of both topics from the beginning (a new group) knows the register's tombstone first
    replay = TranscriptVectors(vectors, embedder, name=REPLAY, tombstones=Register([tombstone]))
    await run_until(
        settings_,
        options,
        registry,
        replay,
        lambda: (
            committed_total(settings_, REPLAY, SOURCE) >= 5
            and committed_total(settings_, REPLAY, DELETIONS) >= 1
        ),
    )
    assert stored() == [("th-1", 5), ("th-2", 4)]
