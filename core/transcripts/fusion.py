"""The semantic signal of transcript search: int8 message vectors and their fusion with BM25.

Vectors: a message's dense vector (the node's embedder, unit-norm floats) is stored as int8, one
byte per dimension (384 bytes for MiniLM), scaled per vector so that its largest component is
+-127 (`quantize`). Only the cosine is ever used, and the cosine does not depend on a vector's
scale, so the scale is not kept (`cosine` takes the int8 vector as it is; cosine to the float
vector ~0.9999). The store computes the cosine where the vectors are (in SQL,
`sinks/clickhouse/vectors.py`); `cosine` here is the same formula in Python, for the tests that
check the SQL against it.

Fusion (`fused`): the BM25 top `CANDIDATES` of a search are re-ordered by

    fused = BM25_WEIGHT * minmax(bm25) + DENSE_WEIGHT * minmax(cosine(query vector, message vector))

min-max taken over the candidates (a constant signal normalises to 0 for all: it cannot reorder).
Measured offline on the LoCoMo dev set (hit@10 0.774 with BM25 alone, 0.799-0.804 fused); the
weights and the candidate count are the researched ones, not tuned further.

A candidate without a vector (its projection is behind, the message has no text, or its vector
was made by another model) is never dropped: its normalised dense score is `NEUTRAL_DENSE` (0.5,
the middle of the normalised range), so it keeps a place decided by its BM25 score, neither
pushed to the bottom nor to the top; the min-max of the dense signal is taken over the
candidates that have one. Equal fused scores keep the BM25 order (`core.transcripts.rerank`
sorts stably).
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence
from operator import mul

CANDIDATES = 50
"""BM25 candidates re-ordered per search (the page is cut from them after the fusion)."""
BM25_WEIGHT = 0.5
DENSE_WEIGHT = 0.5
NEUTRAL_DENSE = 0.5
"""The normalised dense score of a candidate without a vector (module doc)."""


def quantize(vector: Sequence[float]) -> bytes:
    """`vector` as int8 bytes (one per dimension), scaled so its largest |component| is 127
    (all zero bytes for a zero vector)."""
    peak = max((abs(x) for x in vector), default=0.0)
    if peak == 0.0 or not math.isfinite(peak):
        return bytes(len(vector))
    factor = 127.0 / peak
    return array("b", (max(-127, min(127, round(x * factor))) for x in vector)).tobytes()


def cosine(query: Sequence[float], vector: bytes, query_norm: float | None = None) -> float | None:
    """The cosine of `query` (floats; its L2 norm `query_norm` when known) and an int8 `vector`
    from `quantize`; None when there is no vector (empty) or it has another dimension count
    (another model's); 0.0 when either is zero."""
    if not vector or len(vector) != len(query):
        return None
    values = array("b", vector)
    if query_norm is None:
        query_norm = norm(query)
    norms = query_norm * math.sqrt(sum(map(mul, values, values)))
    return sum(map(mul, query, values)) / norms if norms else 0.0


def norm(vector: Sequence[float]) -> float:
    """The L2 norm of `vector`."""
    return math.sqrt(sum(map(mul, vector, vector)))


def minmax(values: Sequence[float]) -> list[float]:
    """`values` scaled to [0, 1] by their minimum and maximum (all 0.0 when they are equal)."""
    if not values:
        return []
    low, high = min(values), max(values)
    span = high - low
    if span <= 0.0:
        return [0.0] * len(values)
    return [(v - low) / span for v in values]


def fused(bm25: Sequence[float], dense: Sequence[float | None]) -> list[float]:
    """The fused score of each candidate (module doc): `bm25` their BM25 scores, `dense` their
    cosines to the query (None: no vector, scored `NEUTRAL_DENSE`). ValueError if the lengths differ."""
    if len(bm25) != len(dense):
        raise ValueError("bm25 and dense must have one score per candidate")
    present = [i for i, d in enumerate(dense) if d is not None]
    normalised = [NEUTRAL_DENSE] * len(dense)
    for i, value in zip(present, minmax([dense[i] or 0.0 for i in present]), strict=True):
        normalised[i] = value
    return [BM25_WEIGHT * b + DENSE_WEIGHT * d for b, d in zip(minmax(bm25), normalised, strict=True)]
