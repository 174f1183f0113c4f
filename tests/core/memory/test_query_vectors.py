from __future__ import annotations

from collections.abc import Sequence

import pytest

from core.embeddings.errors import EmbeddingError
from core.memory.query_vectors import QueryVectors

from .helpers import scope

ALICE, BOB = scope("alice"), scope("bob")


class Counting:
    """An embedder whose vector of a text is (its length, 0.1, 1/3); counts its calls; fails on "down"."""

    model_id = "counting"
    dimensions = 3

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        if "down" in texts:
            raise EmbeddingError("the model is down")
        return [[float(len(t)), 0.1, 1 / 3] for t in texts]


async def test_a_repeated_query_is_embedded_once_and_gets_the_same_floats() -> None:
    embedder = Counting()
    vectors = QueryVectors(embedder)
    first = await vectors.vector(ALICE, "tea?")
    again = await vectors.vector(ALICE, "tea?")
    assert list(first) == list(again) == [4.0, 0.1, 1 / 3]  # exactly the floats returned
    assert embedder.calls == [["tea?"]]
    assert (vectors.hits, vectors.misses) == (1, 1)


async def test_the_least_recently_used_text_is_dropped_first() -> None:
    embedder = Counting()
    vectors = QueryVectors(embedder, size=2)
    for text in ("a", "b", "a", "c", "a", "b"):  # "b" is dropped by "c", "a" stays in use
        await vectors.vector(ALICE, text)
    assert embedder.calls == [["a"], ["b"], ["c"], ["b"]]


async def test_a_query_of_another_scope_is_embedded_anew() -> None:
    embedder = Counting()
    vectors = QueryVectors(embedder)
    for who in (ALICE, BOB, scope("alice", account="other"), scope("alice", agent="other"), ALICE):
        await vectors.vector(who, "tea?")
    assert len(embedder.calls) == 4  # only the last one, alice's again, was kept


async def test_failures_are_not_kept_and_size_zero_keeps_nothing() -> None:
    embedder = Counting()
    vectors = QueryVectors(embedder)
    for _ in range(2):
        with pytest.raises(EmbeddingError):
            await vectors.vector(ALICE, "down")
    assert embedder.calls == [["down"], ["down"]]

    off = QueryVectors(embedder, size=0)
    await off.vector(ALICE, "x")
    await off.vector(ALICE, "x")
    assert embedder.calls[-2:] == [["x"], ["x"]]
    with pytest.raises(ValueError):
        QueryVectors(embedder, size=-1)


async def test_forget_drops_the_vectors_of_the_scopes_it_picks() -> None:
    embedder = Counting()
    vectors = QueryVectors(embedder)
    for who in (ALICE, BOB):
        await vectors.vector(who, "tea?")
        await vectors.vector(who, "coffee?")
    assert vectors.forget(lambda s: s == ALICE) == 2
    assert vectors.forget(lambda s: s == ALICE) == 0
    await vectors.vector(BOB, "tea?")  # kept
    await vectors.vector(ALICE, "tea?")  # embedded again
    assert embedder.calls[-1] == ["tea?"] and len(embedder.calls) == 5
