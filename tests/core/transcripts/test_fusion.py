"""The fusion maths of transcript search's semantic signal (pure: `core.transcripts.fusion`)."""

from __future__ import annotations

import math
from array import array

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.transcripts.fusion import NEUTRAL_DENSE, cosine, fused, minmax, quantize

finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)
unit = st.floats(min_value=-1.0, max_value=1.0, allow_nan=False)


def exact_cosine(a: list[float], b: list[float]) -> float:
    norms = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(x * x for x in b))
    return sum(x * y for x, y in zip(a, b, strict=True)) / norms


@given(st.lists(unit, min_size=8, max_size=64).filter(lambda v: max(abs(x) for x in v) > 1e-3))
def test_quantize_keeps_the_cosine(vector: list[float]) -> None:
    stored = quantize(vector)
    assert len(stored) == len(vector)
    assert max(abs(x) for x in array("b", stored)) == 127  # scaled to the int8 range
    # each component is off by at most half a step of the vector's own scale
    similarity = cosine(vector, stored)
    assert similarity is not None
    assert similarity == pytest.approx(1.0, abs=0.02)


def test_cosine_of_int8_matches_the_float_cosine() -> None:
    a = [0.1 * ((i * 7) % 11 - 5) for i in range(384)]
    b = [0.1 * ((i * 5) % 13 - 6) for i in range(384)]
    assert cosine(a, quantize(b)) == pytest.approx(exact_cosine(a, b), abs=0.01)


def test_cosine_without_a_usable_vector() -> None:
    assert cosine([0.5, 0.5], b"") is None  # no vector yet
    assert cosine([0.5, 0.5], quantize([0.1, 0.2, 0.3])) is None  # another model's dimensions
    assert cosine([0.5, 0.5], quantize([0.0, 0.0])) == 0.0  # a zero vector
    assert quantize([0.0, 0.0, 0.0]) == bytes(3)


@given(st.lists(finite, min_size=1, max_size=50))
def test_minmax_spans_zero_to_one(values: list[float]) -> None:
    scaled = minmax(values)
    assert len(scaled) == len(values)
    assert all(0.0 <= v <= 1.0 for v in scaled)
    if max(values) > min(values):
        assert scaled[values.index(max(values))] == 1.0
        assert scaled[values.index(min(values))] == 0.0
    else:
        assert scaled == [0.0] * len(values)


def test_fused_is_the_researched_half_and_half() -> None:
    # bm25 normalised: 1, 0, 0.5; dense normalised: 0, 1, 0.5
    assert fused([10.0, 2.0, 6.0], [0.1, 0.9, 0.5]) == pytest.approx([0.5, 0.5, 0.5])
    assert fused([10.0, 2.0], [0.9, 0.1]) == pytest.approx([1.0, 0.0])


def test_a_candidate_without_a_vector_gets_the_neutral_dense_score() -> None:
    scores = fused([10.0, 2.0, 6.0], [0.2, None, 0.8])
    # the missing one: 0.5 * 0 (lowest BM25) + 0.5 * NEUTRAL_DENSE; the others min-maxed without it
    assert scores == pytest.approx([0.5 * 1.0 + 0.5 * 0.0, 0.5 * NEUTRAL_DENSE, 0.5 * 0.5 + 0.5 * 1.0])


@given(st.lists(st.tuples(finite, st.one_of(st.none(), unit)), min_size=1, max_size=50))
def test_fused_scores_are_bounded_and_never_drop_a_candidate(pairs: list[tuple[float, float | None]]) -> None:
    scores = fused([b for b, _ in pairs], [d for _, d in pairs])
    assert len(scores) == len(pairs)
    assert all(-1e-12 <= s <= 1.0 + 1e-12 for s in scores)


bm25_scores = st.integers(min_value=0, max_value=10**6).map(lambda n: n / 10**4)
"""BM25 scores as they come (0-100; differences far above a double's precision)."""


@given(st.lists(bm25_scores, min_size=1, max_size=50), st.one_of(st.none(), unit))
def test_a_constant_dense_signal_keeps_the_bm25_order(bm25: list[float], dense: float | None) -> None:
    """No vectors at all (or all equal): the fused order is BM25's, ties in the given order."""
    scores = fused(bm25, [dense] * len(bm25))
    by_fused = sorted(range(len(bm25)), key=lambda i: -scores[i])
    by_bm25 = sorted(range(len(bm25)), key=lambda i: -bm25[i])
    assert by_fused == by_bm25


def test_lengths_must_match() -> None:
    with pytest.raises(ValueError, match="one score per candidate"):
        fused([1.0], [])
