from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest

from core.memory.models import MemoryScope
from core.memory.recall_counts import RecallCounts

from .helpers import scope

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


class Recording:
    """A counting store that records its calls; `gate` holds every write until set; ids named
    "bad" fail."""

    def __init__(self) -> None:
        self.calls: list[tuple[MemoryScope, tuple[str, ...], datetime | None]] = []
        self.gate = asyncio.Event()
        self.gate.set()

    async def record_recall(
        self, scope: MemoryScope, entry_ids: Sequence[str], *, at: datetime | None = None
    ) -> int:
        await self.gate.wait()
        if "bad" in entry_ids:
            raise ConnectionError("database went away")
        self.calls.append((scope, tuple(entry_ids), at))
        return len(entry_ids)


async def test_notes_are_written_behind_the_caller_in_order_with_their_time() -> None:
    store = Recording()
    store.gate.clear()
    counts = RecallCounts(store)
    counts.note(scope("alice"), ["a", "b"], T0)
    counts.note(scope(None), ["c"], T0 + timedelta(seconds=1))
    counts.note(scope("alice"), [], T0)  # nothing to count
    await asyncio.sleep(0)
    assert store.calls == []  # note() did not wait for the writes
    store.gate.set()
    await counts.drain()
    assert store.calls == [
        (scope("alice"), ("a", "b"), T0),
        (scope(None), ("c",), T0 + timedelta(seconds=1)),
    ]
    assert (counts.written, counts.dropped) == (2, 0)

    counts.note(scope("alice"), ["a"], T0)  # a new writer after the last one ended
    await counts.drain()
    assert store.calls[-1] == (scope("alice"), ("a",), T0) and counts.written == 3


async def test_a_failed_write_is_dropped_and_the_next_ones_go_on() -> None:
    store = Recording()
    counts = RecallCounts(store)
    counts.note(scope("alice"), ["bad"], T0)
    counts.note(scope("alice"), ["a"], T0)
    await counts.drain()
    assert store.calls == [(scope("alice"), ("a",), T0)]
    assert (counts.written, counts.dropped) == (1, 1)


async def test_notes_beyond_max_pending_are_dropped() -> None:
    store = Recording()
    store.gate.clear()
    counts = RecallCounts(store, max_pending=2)
    for name in ("a", "b", "c"):
        counts.note(scope("alice"), [name], T0)
    assert counts.dropped == 1
    store.gate.set()
    await counts.drain()
    assert [ids for _, ids, _ in store.calls] == [("a",), ("b",)]


def test_max_pending_must_be_positive() -> None:
    with pytest.raises(ValueError):
        RecallCounts(Recording(), max_pending=0)
