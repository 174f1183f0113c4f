"""The offline MiniLM embedder, with the real model from the wheels."""

from __future__ import annotations

import asyncio
import math

import pytest

from sinks.embeddings.minilm import DIMENSIONS, MODEL_ID, OfflineMiniLM, model_files


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


@pytest.fixture(scope="module")
def model() -> OfflineMiniLM:
    embedder = OfflineMiniLM(batch_size=4)
    embedder.load()
    return embedder


def test_model_files_come_from_the_wheels() -> None:
    onnx, tokenizer = model_files()
    assert onnx.name == "model.onnx" and onnx.stat().st_size > 20_000_000
    assert tokenizer.name == "tokenizer.json"


async def test_vectors_are_unit_norm_with_384_dimensions(model: OfflineMiniLM) -> None:
    assert (model.model_id, model.dimensions) == (MODEL_ID, DIMENSIONS) == ("all-MiniLM-L6-v2-int8", 384)
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
