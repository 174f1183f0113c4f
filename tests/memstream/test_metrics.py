"""`NodeFigures`: a figure whose read fails is left out of the scrape (and logged once) until a
pass reads it again; the others are still served."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest

from core.config import Settings
from memstream.metrics import NodeFigures
from memstream.ops.replay import PartitionLag

TP = tuple[str, int]


class Offsets:
    """The broker reads `NodeFigures` makes, answering from dicts; `down` makes every read fail."""

    def __init__(self) -> None:
        self.down = False

    def _check(self) -> None:
        if self.down:
            raise RuntimeError("broker unreachable")

    def lag(self, group: str, topics: Sequence[str]) -> list[PartitionLag]:
        self._check()
        return [PartitionLag(topic=t, partition=0, committed=3, end=5) for t in topics]

    def partitions(self, topics: Sequence[str]) -> list[TP]:
        self._check()
        return [(t, 0) for t in topics]

    def end_offsets(self, tps: Sequence[TP]) -> dict[TP, int]:
        return dict.fromkeys(tps, 7)

    def earliest(self, tps: Sequence[TP]) -> dict[TP, int]:
        return dict.fromkeys(tps, 4)


def names(figures: NodeFigures) -> dict[str, list[tuple[dict[str, str], float]]]:
    return {m.name: [(s.labels, s.value) for s in m.samples] for m in figures.collect() if m.samples}


async def test_failed_reads_are_left_out_until_they_succeed_again(caplog: pytest.LogCaptureFixture) -> None:
    offsets = Offsets()
    relay_up = True

    async def relay_lag() -> int:
        if not relay_up:
            raise ConnectionError("journal closed")
        return 2

    async def totals() -> tuple[int, int]:
        return 9, 1

    figures = NodeFigures(
        Settings(),
        {"thresholds": ["journal.messages"]},
        relay_lag=relay_lag,
        totals=totals,
        offsets=lambda: offsets,  # type: ignore[arg-type, return-value]
    )
    await figures.refresh()
    served = names(figures)
    assert served["memstream_processor_lag_messages"] == [({"processor": "thresholds"}, 2.0)]
    assert served["memstream_dead_letter_records"] == [({"processor": "thresholds"}, 3.0)]
    assert served["memstream_summaries_written"] == [({}, 9.0)]  # a counter: _total when exposed
    assert served["memstream_compactions_in_flight"] == [({}, 1.0)]
    assert served["memstream_relay_lag_messages"] == [({}, 2.0)]

    offsets.down, relay_up = True, False
    with caplog.at_level(logging.WARNING, logger="memstream.metrics"):
        await figures.refresh()
        await figures.refresh()
    served = names(figures)
    assert "memstream_processor_lag_messages" not in served
    assert "memstream_dead_letter_records" not in served
    assert "memstream_relay_lag_messages" not in served
    assert served["memstream_summaries_written"] == [({}, 9.0)]  # what could be read still is
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 2 and len(set(warnings)) == 2  # the broker's, the relay's: once each

    offsets.down, relay_up = False, True
    await figures.refresh()
    assert "memstream_processor_lag_messages" in names(figures)


async def test_run_gives_up_a_pass_at_once_when_the_node_stops() -> None:
    release = threading.Event()

    class Stuck(Offsets):
        def lag(self, group: str, topics: Sequence[str]) -> list[PartitionLag]:
            release.wait(10)  # a broker call waiting out its timeout
            return super().lag(group, topics)

    stuck = Stuck()

    async def zero() -> Any:
        return 0

    async def totals() -> tuple[int, int]:
        return 0, 0

    figures = NodeFigures(
        Settings(),
        {"a": ["journal.messages"], "b": ["journal.messages"]},
        relay_lag=zero,
        totals=totals,
        offsets=lambda: stuck,  # type: ignore[arg-type, return-value]
    )
    stop = asyncio.Event()
    running = asyncio.create_task(figures.run(stop))
    await asyncio.sleep(0.3)
    stop.set()
    started = time.monotonic()
    await asyncio.wait_for(running, 2)  # not after the stuck call
    assert time.monotonic() - started < 1
    release.set()
