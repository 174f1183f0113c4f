"""The nodes a test starts (crashed at the end if still running)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.memstream.sharding.loops import Node


@pytest.fixture
async def nodes() -> AsyncIterator[list[Node]]:
    """The nodes a test starts (stopped at the end)."""
    started: list[Node] = []
    yield started
    for node in started:
        if not node.task.done():
            await node.crash()
