"""How both adapters fuse a hybrid query's prefetches (`sinks.qdrant.layout`): DBSF by default,
RRF when opened so; the scores are checked against the formulas on hand-made vectors."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from core.embeddings.base import SparseVector
from core.stores.vectors import CollectionRef, IndexFilter, IndexPoint
from sinks.qdrant.layout import FUSION, RRF_K, Fusion
from tests.sinks.qdrant.adapters import KINDS, Index, open_adapter

REF = CollectionRef(environment="test", account_id="acme", model_id="hand-made")
EVERYONE = IndexFilter(agent_id="bot", user_id=None)
TERM = SparseVector(indices=(7,), values=(1.0,))
NO_TERMS = SparseVector(indices=(), values=())
"""A query of stop words only: no sparse prefetch, the dense one alone is fused."""


def point(entry_id: str, dense: Sequence[float], sparse: SparseVector = TERM) -> IndexPoint:
    payload: dict[str, str | float | int | None] = {
        "agent_id": "bot",
        "user_id": None,
        "visibility": "shared",
        "category": "observation",
    }
    return IndexPoint(entry_id=entry_id, dense=tuple(dense), sparse=sparse, payload=payload)


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def index(kind: str, tmp_path: Path) -> AsyncIterator[Index]:
    opened = open_adapter(kind, tmp_path)
    yield opened
    await opened.close()


def test_both_adapters_default_to_dbsf(kind: str, tmp_path: Path) -> None:
    assert FUSION is Fusion.DBSF
    assert open_adapter(kind, tmp_path).fusion is Fusion.DBSF


async def test_dbsf_maps_each_list_by_its_mean_and_three_sample_deviations(index: Index) -> None:
    # eleven points close to the query and one opposite it: the outlier lies more than 3 sd
    # below the mean, so its score is below 0 (DBSF does not clip)
    angles = [0.02 * i for i in range(11)]
    points = [point(f"near-{i}", (math.cos(a), math.sin(a))) for i, a in enumerate(angles)]
    points.append(point("far", (-1.0, 0.0)))
    await index.upsert(REF, points)
    found = await index.hybrid_query(REF, [1.0, 0.0], NO_TERMS, EVERYONE, 20)
    cosines = {p.entry_id: p.dense[0] / math.hypot(*p.dense) for p in points}
    mean = sum(cosines.values()) / len(cosines)
    sd = math.sqrt(sum((c - mean) ** 2 for c in cosines.values()) / (len(cosines) - 1))
    expected = {e: (c - (mean - 3 * sd)) / (6 * sd) for e, c in cosines.items()}
    assert [f.entry_id for f in found] == [f"near-{i}" for i in range(11)] + ["far"]
    for item in found:
        assert item.score == pytest.approx(expected[item.entry_id], abs=1e-4)
    assert found[-1].score < 0 < found[0].score


async def test_dbsf_sums_the_prefetches_that_found_a_point(index: Index) -> None:
    await index.upsert(REF, [point("only", (1.0, 0.0))])
    # a lone candidate scores 0.5 in each list that holds it
    both = await index.hybrid_query(REF, [1.0, 0.0], TERM, EVERYONE, 5)
    dense_only = await index.hybrid_query(
        REF, [1.0, 0.0], SparseVector(indices=(9,), values=(1.0,)), EVERYONE, 5
    )
    assert [(s.entry_id, s.score) for s in both] == [("only", pytest.approx(1.0))]
    assert [(s.entry_id, s.score) for s in dense_only] == [("only", pytest.approx(0.5))]
    # the term's match lifts a point the dense list ranks second above the dense winner
    await index.upsert(
        REF,
        [
            point("dense-best", (1.0, 0.0), NO_TERMS),
            point("both", (0.9, 0.1)),
            point("neither", (0.0, 1.0), NO_TERMS),
        ],
    )
    await index.delete(REF, ["only"])
    found = await index.hybrid_query(REF, [1.0, 0.0], TERM, EVERYONE, 5)
    assert [s.entry_id for s in found] == ["both", "dense-best", "neither"]
    assert 1.0 < found[0].score < 2.0


async def test_an_adapter_opened_with_rrf_fuses_by_rank(kind: str, tmp_path: Path) -> None:
    index = open_adapter(kind, tmp_path, Fusion.RRF)
    try:
        await index.upsert(REF, [point("a", (1.0, 0.0)), point("b", (0.8, 0.6), NO_TERMS)])
        found = await index.hybrid_query(REF, [1.0, 0.0], TERM, EVERYONE, 5)
        assert [(s.entry_id, s.score) for s in found] == [
            ("a", pytest.approx(2 / RRF_K)),  # ranks count from 0
            ("b", pytest.approx(1 / (RRF_K + 1))),
        ]
    finally:
        await index.close()
