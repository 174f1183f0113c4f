"""What both rebuilds share: their error, their report, throttled progress and stall detection."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field

from core.errors import MemstreamError
from memstream.ops.progress import Progress, ProgressCallback

log = logging.getLogger("memstream.ops.rebuild")

IDLE_TIMEOUT_S = 60.0
"""How long reading may bring nothing the rebuild still needs before it fails."""
PROGRESS_EVERY_S = 0.5


class RebuildFailed(MemstreamError):
    """The rebuild could not complete; the message says why and what was left as it was."""

    code = "rebuild_failed"


@dataclass(frozen=True)
class RebuildReport:
    target: str  # "clickhouse" | "qdrant"
    rows: int  # rows/points in the fresh projection
    seconds: float
    details: dict[str, int] = field(default_factory=dict)


class Reporter:
    """Progress throttled to one call per PROGRESS_EVERY_S (a new phase or `force` always passes),
    with the phase's rate in `figures["per_s"]`."""

    def __init__(self, callback: ProgressCallback) -> None:
        self.callback = callback
        self._last = 0.0
        self._phase = ""
        self._phase_start = time.monotonic()
        self._phase_done = 0

    def __call__(
        self,
        phase: str,
        done: int,
        total: int | None,
        detail: str = "",
        *,
        force: bool = False,
        **figures: float,
    ) -> None:
        now = time.monotonic()
        if phase != self._phase:
            self._phase, self._phase_start, self._phase_done = phase, now, done
            force = True
        if not force and now - self._last < PROGRESS_EVERY_S:
            return
        self._last = now
        elapsed = now - self._phase_start
        rate = (done - self._phase_done) / elapsed if elapsed > 0 else 0.0
        self.callback(Progress(phase, done, total, detail, {"per_s": round(rate, 1), **figures}))


class Stall:
    """Whether a read loop went `timeout_s` without progress (the caller says what progress is)."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.since = time.monotonic()

    def progressed(self) -> None:
        self.since = time.monotonic()

    @property
    def stalled(self) -> bool:
        return time.monotonic() - self.since > self.timeout_s


async def quietly(call: Awaitable[None], what: str) -> None:
    """Await a clean-up, logging (not raising) its failure: the original failure matters more."""
    try:
        await call
    except Exception as exc:
        log.warning("rebuild: %s failed: %s", what, exc)
