"""ClickHouseMessageVectors against the real embedded engine (chdb): the `message_vectors` table,
idempotent inserts, the BM25 search joined with the vectors in one query (same hits and order as
`search`, the cosine computed in SQL as `fusion.cosine` does, None for a missing vector, another
model's never used), pruning after a rebuild, a thread deletion's seq-bounded DELETE and the
upgrade of a table made before the `seq` column."""

from __future__ import annotations

from typing import Any

import pytest

from core.stores.message_vectors import Candidate, MessageVector
from core.stores.transcripts import TranscriptRow, TranscriptScope
from core.transcripts.fusion import cosine
from sinks.clickhouse.schema import create_vectors_table
from sinks.clickhouse.store import ClickHouseTranscriptStore
from sinks.clickhouse.vectors import ClickHouseMessageVectors
from tests.sinks.clickhouse.rows import row

ALICE = TranscriptScope(environment="test", account_id="acct", agent_id="agent", user_id="alice")
MODEL = "model-a"


def vector_of(r: TranscriptRow, data: bytes, *, model: str = MODEL) -> MessageVector:
    return MessageVector(
        environment=r.environment,
        account_id=r.account_id,
        agent_id=r.agent_id,
        user_id=r.user_id,
        thread_id=r.thread_id,
        offset=r.offset,
        message_id=r.message_id,
        model=model,
        vector=data,
        seq=r.seq,
    )


def rows() -> list[TranscriptRow]:
    return [
        row("a1", 0, "My invoice 42 shows a wrong refund amount.", user_id="alice"),
        row("a1", 1, "The refund is 30 euros.", role="assistant", user_id="alice"),
        row("a1", 2, "refund tool output", role="tool", user_id="alice"),
        row("a2", 0, "Can I get a refund for my March invoice?", user_id="alice"),
        row("b1", 0, "Bob: my invoice has a refund problem too.", user_id="bob"),
    ]


def by_message(found: list[Candidate]) -> dict[str, float | None]:
    return {c.hit.message_id: c.cosine for c in found}


@pytest.fixture
def vectors(transcript_store: ClickHouseTranscriptStore) -> ClickHouseMessageVectors:
    return ClickHouseMessageVectors(transcript_store)


async def test_the_table_is_created_with_the_transcript_schema(
    transcript_store: ClickHouseTranscriptStore, chdb_client: Any
) -> None:
    db = transcript_store.database
    engine, sorting = chdb_client.query(
        "SELECT engine_full, sorting_key FROM system.tables WHERE database = {db:String} "
        "AND name = 'message_vectors'",
        parameters={"db": db},
    ).result_rows[0]
    assert engine.startswith("ReplacingMergeTree(inserted_at)")
    assert "fsync_after_insert = 1" in engine
    assert sorting == "environment, account_id, agent_id, thread_id, offset"
    columns = chdb_client.query(
        "SELECT name, type FROM system.columns WHERE database = {db:String} AND table = 'message_vectors' "
        "ORDER BY position",
        parameters={"db": db},
    ).result_rows
    assert [c[0] for c in columns] == [
        "environment", "account_id", "agent_id", "user_id", "thread_id", "offset", "seq", "shard",
        "message_id", "model", "vector", "inserted_at",
    ]  # fmt: skip
    await ClickHouseMessageVectors(transcript_store).ensure_schema()  # idempotent


async def test_candidates_are_the_search_hits_with_their_vectors(
    transcript_store: ClickHouseTranscriptStore, vectors: ClickHouseMessageVectors
) -> None:
    stored = rows()
    await transcript_store.insert(stored)
    a1_0, a2_0 = stored[0], stored[3]
    await vectors.insert_vectors([vector_of(a1_0, bytes([1, 2, 255]))])
    await vectors.insert_vectors([vector_of(a1_0, bytes([1, 2, 255]))])  # redelivered: one row read
    await vectors.insert_vectors([vector_of(a2_0, bytes([9, 9, 9]), model="model-b")])  # another model
    query = [0.3, -0.5, 0.1]
    for thread in (None, "a1"):
        found = await vectors.candidates(
            ALICE, "refund invoice", model=MODEL, query_vector=query, thread_id=thread, limit=50
        )
        expected = await transcript_store.search(ALICE, "refund invoice", thread_id=thread, limit=50)
        assert [c.hit for c in found] == expected  # same hits, same order, same scope and roles
        by_id = {c.hit.message_id: c.cosine for c in found}
        assert by_id.pop(a1_0.message_id) == pytest.approx(cosine(query, bytes([1, 2, 255])), abs=1e-6)
        assert set(by_id.values()) == {None}  # no vector yet, or only another model's
    found = await vectors.candidates(ALICE, "refund", model=MODEL, query_vector=[0.3, 0.2], limit=50)
    assert {c.cosine for c in found} == {None}  # a query vector of another dimension count
    found = await vectors.candidates(ALICE, "refund", model=MODEL, query_vector=None, limit=50)
    assert {c.cosine for c in found} == {None}  # no query vector
    found = await vectors.candidates(ALICE, "refund", model=MODEL, query_vector=[0.0, 0.0, 0.0], limit=50)
    assert by_message(found)[a1_0.message_id] == 0.0  # a zero vector: cosine 0
    assert await vectors.candidates(ALICE, "the", model=MODEL, query_vector=query, limit=50) == []


async def test_another_users_vector_never_joins(
    transcript_store: ClickHouseTranscriptStore, vectors: ClickHouseMessageVectors
) -> None:
    mine = row("t1", 0, "refund please", user_id="alice")
    await transcript_store.insert([mine])
    # a vector claiming the same message position but written under another user
    await vectors.insert_vectors([vector_of(row("t1", 0, "refund please", user_id="bob"), b"\x05")])
    found = await vectors.candidates(ALICE, "refund", model=MODEL, query_vector=[1.0], limit=10)
    assert [(c.hit.message_id, c.cosine) for c in found] == [(mine.message_id, None)]


async def test_prune_deletes_only_old_vectors_of_rows_gone(
    transcript_store: ClickHouseTranscriptStore, vectors: ClickHouseMessageVectors, chdb_client: Any
) -> None:
    kept, gone = row("t1", 0, "kept", user_id="alice"), row("t1", 1, "gone", user_id="alice")
    await transcript_store.insert([kept])
    await vectors.insert_vectors([vector_of(kept, b"\x01"), vector_of(gone, b"\x02")])
    mark = await vectors.clock()
    late = row("t1", 2, "not projected yet", user_id="alice")
    await vectors.insert_vectors([vector_of(late, b"\x03")])
    await vectors.prune(mark)
    left = chdb_client.query(
        f"SELECT offset FROM {transcript_store.database}.message_vectors ORDER BY offset"
    ).result_rows
    assert [r[0] for r in left] == [0, 2]


async def test_delete_thread_removes_the_vectors_up_to_the_seq_only(
    transcript_store: ClickHouseTranscriptStore, vectors: ClickHouseMessageVectors
) -> None:
    old = [row("t1", i, f"old {i}", user_id="alice", seq=i + 1) for i in range(3)]
    again = row("t1", 3, "the id used again", user_id="alice", seq=10)
    other = row("t2", 0, "another thread", user_id="alice", seq=4)
    await vectors.insert_vectors([vector_of(r, b"\x01") for r in [*old, again, other]])
    await vectors.insert_vectors([vector_of(old[0], b"\x01")])  # a redelivered copy
    scope = ("test", "acct", "t1")
    assert await vectors.count_thread_rows(*scope, 3) == 4  # copies count each
    assert await vectors.delete_thread(*scope, 3) == 4
    assert await vectors.count_thread_rows(*scope, 3) == 0
    assert await vectors.delete_thread(*scope, 3) == 0  # again: idempotent
    assert await vectors.count_thread_rows(*scope, 10) == 1  # the re-created thread's vector stays
    assert await vectors.count_thread_rows("test", "acct", "t2", 10) == 1
    assert await vectors.count_thread_rows("test", "other", "t1", 10) == 0


async def test_a_table_made_before_the_seq_column_is_upgraded(
    transcript_store: ClickHouseTranscriptStore, chdb_client: Any
) -> None:
    db = transcript_store.database
    chdb_client.command(f"DROP TABLE {db}.message_vectors")
    old_ddl = (
        create_vectors_table(db).replace("    seq UInt64,\n", "").replace("    shard UInt16 DEFAULT 0,\n", "")
    )
    assert "seq" not in old_ddl and "shard" not in old_ddl
    chdb_client.command(old_ddl)
    chdb_client.command(
        f"INSERT INTO {db}.message_vectors (environment, account_id, agent_id, user_id, thread_id, offset, "
        "message_id, model, vector) VALUES ('test', 'acct', 'agent', NULL, 't1', 0, 't1-m0', 'm', [1])"
    )
    vectors = ClickHouseMessageVectors(transcript_store)
    await vectors.ensure_schema()
    await transcript_store.ensure_schema()  # both upgrade, idempotently
    columns = chdb_client.query(
        "SELECT name FROM system.columns WHERE database = {db:String} AND table = 'message_vectors' "
        "ORDER BY position",
        parameters={"db": db},
    ).result_rows
    assert [c[0] for c in columns][5:8] == ["offset", "seq", "shard"]
    assert await vectors.count_thread_rows("test", "acct", "t1", 1) == 1  # an old row has seq 0
    await vectors.insert_vectors([vector_of(row("t1", 1, "new", seq=5), b"\x02")])
    assert await vectors.delete_thread("test", "acct", "t1", 5) == 2
