"""The offline MiniLM embedder, with the real model from the wheels."""

from __future__ import annotations

import asyncio
import math
import threading
from pathlib import Path

import pytest

from core.embeddings.errors import EmbeddingError
from sinks.embeddings.minilm import DIMENSIONS, MODEL_ID, REFERENCE_MODEL_ID, OfflineMiniLM, model_files


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


@pytest.fixture(scope="module", params=[MODEL_ID, REFERENCE_MODEL_ID])
def model(request: pytest.FixtureRequest) -> OfflineMiniLM:
    embedder = OfflineMiniLM(request.param, batch_size=4)
    embedder.load()
    return embedder


@pytest.fixture(scope="module")
def reference() -> OfflineMiniLM:
    embedder = OfflineMiniLM(REFERENCE_MODEL_ID)
    embedder.load()
    return embedder


def test_model_files_come_from_the_wheels() -> None:
    onnx, tokenizer = model_files()
    assert onnx.name == "model.onnx" and onnx.stat().st_size > 20_000_000
    assert tokenizer.name == "tokenizer.json"


async def test_vectors_are_unit_norm_with_384_dimensions(model: OfflineMiniLM) -> None:
    assert model.dimensions == DIMENSIONS == 384
    assert (MODEL_ID, REFERENCE_MODEL_ID) == ("all-MiniLM-L6-v2-q8", "all-MiniLM-L6-v2-int8")
    vectors = await model.embed(["hello", "", "x" * 5000])  # empty and over-long texts too
    assert [len(v) for v in vectors] == [384, 384, 384]
    for vector in vectors:
        assert math.isclose(math.sqrt(sum(x * x for x in vector)), 1.0, abs_tol=1e-5)
    assert await model.embed([]) == []


async def test_similar_texts_are_closer_than_unrelated_ones(model: OfflineMiniLM) -> None:
    tea, drink, tax = await model.embed(
        [
            "The user prefers green tea in the morning.",
            "What does the user like to drink?",
            "Quarterly tax filings are due in April.",
        ]
    )
    assert cosine(tea, drink) > cosine(tea, tax) + 0.2
    assert cosine(tea, drink) > cosine(drink, tax) + 0.2


async def test_deterministic_and_a_batch_equals_texts_embedded_alone(model: OfflineMiniLM) -> None:
    texts = [
        "short",
        "a somewhat longer sentence about deployments on Friday",
        "tea " * 300,
        "Biscuit the cat",
        "x",
        "the project uses PostgreSQL 16 with logical replication for invoices",
    ]
    batch = await model.embed(texts)  # batch_size=4: two batches of mixed lengths
    assert await model.embed(texts) == batch
    for text, vector in zip(texts, batch, strict=True):
        (alone,) = await model.embed([text])
        assert max(abs(a - b) for a, b in zip(alone, vector, strict=True)) < 1e-5
    reordered = await model.embed(list(reversed(texts)))
    for a, b in zip(reversed(reordered), batch, strict=True):
        assert max(abs(x - y) for x, y in zip(a, b, strict=True)) < 1e-5


async def test_embedding_does_not_block_the_event_loop(model: OfflineMiniLM) -> None:
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.005)
            ticks += 1

    ticker = asyncio.create_task(tick())
    try:
        await model.embed(["a fairly long sentence to keep the model busy for a while " * 20] * 16)
    finally:
        ticker.cancel()
    assert ticks >= 3


async def test_the_int8_model_ranks_like_the_wheels_model(
    model: OfflineMiniLM, reference: OfflineMiniLM
) -> None:
    texts = [
        "The user prefers green tea in the morning.",
        "Deployments are frozen on Fridays.",
        "The staging cluster runs PostgreSQL 16.",
        "Biscuit the cat is allergic to chicken.",
    ]
    query = "what does the user drink?"
    ours, theirs = await model.embed([query, *texts]), await reference.embed([query, *texts])
    for a, b in zip(ours, theirs, strict=True):
        assert cosine(a, b) > 0.97  # int8 arithmetic against float32 on the same weights
    rank = lambda vs: sorted(range(len(texts)), key=lambda i: -cosine(vs[0], vs[i + 1]))  # noqa: E731
    assert rank(ours)[0] == rank(theirs)[0] == 0


async def test_a_query_is_served_before_queued_bulk_work() -> None:
    slow = OfflineMiniLM(MODEL_ID, workers=1)
    slow.load()
    bulk = asyncio.ensure_future(slow.embed(["a sentence long enough to take a while to embed " * 8] * 64))
    await asyncio.sleep(0.05)  # the bulk pieces are queued and the worker is on the first
    (vector,) = await slow.embed(["what does the user drink?"])
    assert not bulk.done(), "the query waited for the whole bulk call"
    assert len(vector) == DIMENSIONS and len(await bulk) == 64


async def test_a_query_waits_for_at_most_the_bulk_text_being_embedded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    one = OfflineMiniLM(MODEL_ID, workers=1)
    one.load()
    order: list[str] = []
    taken = threading.Event()
    run_alone = one._run_alone

    def recording(session: object, texts: list[str]) -> object:
        order.extend(texts)
        taken.set()
        return run_alone(session, texts)

    monkeypatch.setattr(one, "_run_alone", recording)
    long = "a sentence long enough to take a while to embed " * 20  # ~200 tokens: tens of ms each
    bulk = asyncio.ensure_future(one.embed([f"{i}: {long}" for i in range(24)]))
    assert await asyncio.to_thread(taken.wait, 30)  # every bulk piece is queued, the worker took one
    await one.embed(["what does the user drink?"])
    assert order.index("what does the user drink?") <= 1  # behind the text the worker had taken
    await bulk


def test_an_unknown_offline_model_is_refused() -> None:
    with pytest.raises(ValueError, match="all-MiniLM-L6-v2-q8 or all-MiniLM-L6-v2-int8"):
        OfflineMiniLM("all-MiniLM-L12-v2")


def test_an_unwritable_model_cache_is_an_embedding_error_naming_the_setting(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    with pytest.raises(EmbeddingError, match="MEMSTREAM_MODEL_CACHE"):
        OfflineMiniLM(MODEL_ID, cache_dir=blocked / "models").load()
