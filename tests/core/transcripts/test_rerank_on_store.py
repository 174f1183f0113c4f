"""The dense re-rank of `journal_message_search` over the real transcript store (chdb) and the real
offline MiniLM: the semantic signal reorders BM25's candidates, a candidate without a vector is kept,
no vectors at all gives BM25's order exactly, scope and role rules are the store's, and the tool
with re-rank off is today's search."""

from __future__ import annotations

from collections.abc import Sequence

from core.chat.offline import OfflineChatModel
from core.embeddings.errors import EmbeddingError
from core.stores.message_vectors import MessageVector
from core.stores.transcripts import TranscriptRow, TranscriptScope
from core.transcripts.caller import JournalContext
from core.transcripts.fusion import quantize
from core.transcripts.rerank import DenseRerank
from core.transcripts.tools import JournalTools
from sinks.clickhouse.store import ClickHouseTranscriptStore
from sinks.clickhouse.vectors import ClickHouseMessageVectors
from sinks.embeddings.minilm import OfflineMiniLM
from tests.sinks.clickhouse.rows import row

ALICE = TranscriptScope(environment="test", account_id="acct", agent_id="agent", user_id="alice")
QUERY = "When did Caroline go to the LGBTQ support group?"


def conversation() -> list[TranscriptRow]:
    """The answer shares one word with the question; the decoys share more, but mean other things."""
    return [
        row("t1", 0, "The group chat for the office party is busy.", user_id="alice"),
        row("t1", 1, "Caroline said the group photo looked great.", role="assistant", user_id="alice"),
        row("t1", 2, "Caroline: tech support fixed my printer cable.", user_id="alice"),
        row("t1", 3, "Yesterday I went to an LGBTQ meeting; that group helped me a lot.", user_id="alice"),
        row("t1", 4, "support group tool output", role="tool", user_id="alice"),
        row("t2", 0, "Caroline went to the LGBTQ support group on Monday.", user_id="bob"),
    ]


async def embed_all(
    store: ClickHouseTranscriptStore, embedder: OfflineMiniLM, rows: list[TranscriptRow]
) -> ClickHouseMessageVectors:
    vectors = ClickHouseMessageVectors(store)
    texts = [r for r in rows if r.role in ("user", "assistant")]
    embedded = await embedder.embed([r.content for r in texts])
    await vectors.insert_vectors(
        [
            MessageVector(
                r.environment,
                r.account_id,
                r.agent_id,
                r.user_id,
                r.thread_id,
                r.offset,
                r.message_id,
                embedder.model_id,
                quantize(v),
                r.seq,
            )
            for r, v in zip(texts, embedded, strict=True)
        ]
    )
    return vectors


async def test_the_dense_signal_reorders_bm25_candidates(
    transcript_store: ClickHouseTranscriptStore, embedder: OfflineMiniLM
) -> None:
    rows = conversation()
    await transcript_store.insert(rows)
    vectors = await embed_all(transcript_store, embedder, rows)
    bm25 = await transcript_store.search(ALICE, QUERY, limit=10)
    reranked = await DenseRerank(vectors, embedder).search(ALICE, QUERY, limit=10)
    assert sorted(h.message_id for h in reranked) == sorted(h.message_id for h in bm25)  # same candidates
    assert {h.thread_id for h in reranked} == {"t1"}  # Bob's thread and the tool message never come
    assert reranked[0].message_id == "t1-m3"  # the LGBTQ meeting, by meaning
    assert bm25[0].message_id != "t1-m3"
    assert [h.score for h in reranked] == sorted((h.score for h in reranked), reverse=True)
    page = await DenseRerank(vectors, embedder).search(ALICE, QUERY, limit=2)
    assert page == reranked[:2]  # the page is cut after the fusion


async def test_without_vectors_the_order_is_bm25s(
    transcript_store: ClickHouseTranscriptStore, embedder: OfflineMiniLM
) -> None:
    await transcript_store.insert(conversation())
    rerank = DenseRerank(ClickHouseMessageVectors(transcript_store), embedder)
    for thread in (None, "t1"):
        bm25 = await transcript_store.search(ALICE, QUERY, thread_id=thread, limit=10)
        found = await rerank.search(ALICE, QUERY, thread_id=thread, limit=10)
        assert [h.message_id for h in found] == [h.message_id for h in bm25]
    assert await rerank.search(ALICE, "the and of", limit=10) == []  # stop words only: nothing


async def test_a_candidate_without_a_vector_is_kept(
    transcript_store: ClickHouseTranscriptStore, embedder: OfflineMiniLM
) -> None:
    rows = conversation()
    await transcript_store.insert(rows)
    vectors = await embed_all(transcript_store, embedder, [r for r in rows if r.message_id != "t1-m1"])
    found = await DenseRerank(vectors, embedder).search(ALICE, QUERY, limit=10)
    bm25 = await transcript_store.search(ALICE, QUERY, limit=10)
    assert "t1-m1" in {h.message_id for h in found}
    assert len(found) == len(bm25)


async def test_the_tool_with_and_without_rerank(
    transcript_store: ClickHouseTranscriptStore, embedder: OfflineMiniLM
) -> None:
    rows = conversation()
    await transcript_store.insert(rows)
    vectors = await embed_all(transcript_store, embedder, rows)
    context = JournalContext(scope=ALICE, thread_id="t1")
    arguments = {"query": QUERY, "summarize": False}
    off = await JournalTools.build(transcript_store, OfflineChatModel()).invoke(
        "journal_message_search", arguments, context
    )
    bm25 = await transcript_store.search(ALICE, QUERY, limit=10)
    assert [m["message_id"] for m in off["messages"]] == [h.message_id for h in bm25]  # today's search
    on = await JournalTools.build(
        transcript_store, OfflineChatModel(), DenseRerank(vectors, embedder)
    ).invoke("journal_message_search", arguments, context)
    assert on["messages"][0]["message_id"] == "t1-m3"


class Down:
    """An embedder of `model_id` that cannot embed (the model is down)."""

    dimensions = 384

    def __init__(self, model_id: str) -> None:
        self.model_id = model_id
        self.calls = 0

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls += 1
        raise EmbeddingError("the model is down")


async def test_a_query_that_cannot_be_embedded_gets_bm25s_order(
    transcript_store: ClickHouseTranscriptStore, embedder: OfflineMiniLM
) -> None:
    rows = conversation()
    await transcript_store.insert(rows)
    vectors = await embed_all(transcript_store, embedder, rows)
    down = Down(embedder.model_id)
    found = await DenseRerank(vectors, down).search(ALICE, QUERY, limit=10)
    bm25 = await transcript_store.search(ALICE, QUERY, limit=10)
    assert [h.message_id for h in found] == [h.message_id for h in bm25]  # not an error
    assert down.calls == 1
