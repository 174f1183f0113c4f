"""BM25 sparse vectors from qdrant_edge's model."""

from __future__ import annotations

from sinks.embeddings.bm25 import Bm25Sparse


def test_documents_weigh_terms_and_queries_count_each_term_once() -> None:
    bm25 = Bm25Sparse()
    doc = bm25.encode_document("Deployments deploy deployed: the deploy runs on Friday, Friday only.")
    query = bm25.encode_query("deploy friday friday")
    assert len(doc.indices) == len(doc.values) == len(set(doc.indices)) > 0
    assert query.values == (1.0,) * len(query.indices) and len(query.indices) == 2  # stemmed, deduplicated
    assert set(query.indices) <= set(doc.indices)  # "deploy" and "friday" match after stemming
    weights = dict(zip(doc.indices, doc.values, strict=True))
    assert all(w > 0 for w in weights.values())
    once = dict(
        zip(
            *[bm25.encode_document("deploy friday").indices, bm25.encode_document("deploy friday").values],
            strict=True,
        )
    )
    friday = next(i for i in query.indices if i in once)
    assert weights[friday] > once[friday]  # term frequency counts


def test_stop_words_only_give_an_empty_vector() -> None:
    assert Bm25Sparse().encode_query("the and of").indices == ()
    assert Bm25Sparse().encode_document("").indices == ()
