"""The garbage collector's settings of the node and worker processes (`tune_gc`).

With CPython's default thresholds (700, 10, 10) a busy node runs a young collection every few
hundred allocations and, every so often, a full collection that walks every object the process
holds (the loaded libraries, the caches, the windows): measured on the node under load, those
full collections were the p99 of `GET /context` (91-121 ms at 16 connections, 15-17 ms without
them) and cost ~10% of its throughput. Almost everything a request allocates is freed by
reference counting; the collector is only needed for reference cycles, which are rare here.

So, once a process has started: what start-up built is collected once and then frozen (moved to
a generation the collector never walks again: `gc.freeze`), and the thresholds are raised to
`THRESHOLDS`, so young collections are ~70 times rarer and full ones rarer still. Cycles are still
collected; memory held by garbage cycles is bounded by the same thresholds.
"""

from __future__ import annotations

import gc

THRESHOLDS = (50_000, 50, 1_000)
"""`gc.set_threshold` of a started node or worker (CPython's default: 700, 10, 10)."""


def tune_gc(thresholds: tuple[int, int, int] = THRESHOLDS) -> None:
    """Collect what start-up left, freeze the survivors and raise the thresholds (module doc)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*thresholds)
