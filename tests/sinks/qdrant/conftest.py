"""Fixtures for the Qdrant adapter tests: one parametrised `open_index` over both adapters (the
`VectorIndex` contract, with the fake too, is tests/core/stores/test_vectors.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from core.stores.vectors import VectorIndex
from tests.sinks.qdrant.adapters import KINDS, open_adapter

OpenIndex = Callable[[], Awaitable[VectorIndex]]


@pytest.fixture(params=KINDS)
async def open_index(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[OpenIndex]:
    """Opens the adapter under test on one tmp directory: Qdrant Edge, or qdrant-client's local
    mode (`path=`, the server code path). Calling it again after closing reopens the same data."""
    opened: list[VectorIndex] = []

    async def open_() -> VectorIndex:
        index = open_adapter(request.param, tmp_path)
        opened.append(index)
        return index

    yield open_
    for index in opened:
        await index.close()
