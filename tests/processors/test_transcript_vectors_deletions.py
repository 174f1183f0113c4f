"""transcript-vectors and thread deletions (`journal.deletions`), on the real ClickHouse (chdb) and
the offline MiniLM: a tombstone deletes the thread's vectors up to its seq, a replay or a
redelivery never brings them back, a new processor knows the register's tombstones before its
first batch, and a thread id used again keeps its new vectors."""

from __future__ import annotations

from typing import Any

from core.stores.deletions import Tombstone
from processors.transcript_vectors import TranscriptVectors
from sinks.clickhouse.store import ClickHouseTranscriptStore
from sinks.clickhouse.vectors import ClickHouseMessageVectors
from sinks.embeddings.minilm import OfflineMiniLM
from tests.processors.test_clickhouse_projection_deletions import THREAD, Register, deletion, history
from tests.processors.transcript_support import message, record_of


def stored(chdb_client: Any, store: ClickHouseTranscriptStore) -> list[tuple[str, int]]:
    rows = chdb_client.query(
        f"SELECT DISTINCT thread_id, seq FROM {store.database}.message_vectors ORDER BY thread_id, seq"
    ).result_rows
    return [(str(r[0]), int(r[1])) for r in rows]


def processor(
    store: ClickHouseTranscriptStore, embedder: OfflineMiniLM, known: list[Tombstone] | None = None
) -> TranscriptVectors:
    register = Register(known) if known is not None else None
    return TranscriptVectors(ClickHouseMessageVectors(store), embedder, tombstones=register)


async def test_a_tombstone_deletes_the_vectors_and_a_replay_does_not_bring_them_back(
    transcript_store: ClickHouseTranscriptStore, embedder: OfflineMiniLM, chdb_client: Any
) -> None:
    vectors = processor(transcript_store, embedder)
    await vectors.process(history())
    assert stored(chdb_client, transcript_store) == [("th-1", 1), ("th-1", 2), ("th-2", 3)]
    await vectors.process([deletion(THREAD, 0)])
    assert stored(chdb_client, transcript_store) == [("th-2", 3)]
    await vectors.process(history())  # a replay of journal.messages
    await vectors.process([deletion(THREAD, 0)])  # a redelivery: idempotent
    assert stored(chdb_client, transcript_store) == [("th-2", 3)]
    again = record_of(message("th-1", 0, "a new life", seq=9), 3)  # the thread id used again
    await vectors.process([again])
    await vectors.process([deletion(THREAD, 1)])  # the old tombstone again: the new vector stays
    assert stored(chdb_client, transcript_store) == [("th-1", 9), ("th-2", 3)]


async def test_in_one_batch_the_tombstone_applies_before_the_messages(
    transcript_store: ClickHouseTranscriptStore, embedder: OfflineMiniLM, chdb_client: Any
) -> None:
    await processor(transcript_store, embedder).process([*history(), deletion(THREAD, 0)])
    assert stored(chdb_client, transcript_store) == [("th-2", 3)]


async def test_a_new_processor_knows_the_registers_tombstones_before_embedding(
    transcript_store: ClickHouseTranscriptStore, embedder: OfflineMiniLM, chdb_client: Any
) -> None:
    vectors = processor(transcript_store, embedder, [THREAD])
    await vectors.start()
    await vectors.process(history())  # a replay from the beginning
    assert stored(chdb_client, transcript_store) == [("th-2", 3)]
