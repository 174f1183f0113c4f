"""Drawing progress in a terminal: one `\\r`-rewritten bar line on a TTY, else a line per phase.

`ProgressLine(write, tty)` is a `ProgressCallback`; call `finish()` after the last progress to
end the bar's line. `bar(progress)` is the pure formatting (tested on its own).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from memstream.ops.progress import Progress

WIDTH = 30


def bar(progress: Progress, width: int = WIDTH) -> str:
    """`phase [#####.....]  50% 5/10 detail figures` (no bar when the total is unknown)."""
    figures = " ".join(f"{k}={v:g}" for k, v in progress.figures.items())
    tail = " ".join(part for part in (progress.detail, figures) if part)
    if progress.total:
        fraction = min(1.0, max(0.0, progress.done / progress.total))
        filled = round(fraction * width)
        drawn = f"[{'#' * filled}{'.' * (width - filled)}]"
        head = f"{drawn} {fraction * 100:3.0f}% {progress.done}/{progress.total}"
    elif progress.total == 0:
        head = f"[{'#' * width}] 100% 0/0"
    else:
        head = f"{progress.done}"
    return f"{progress.phase:<10} {head} {tail}".rstrip()


class ProgressLine:
    """See the module doc. Off a TTY, prints a phase's line when it starts and at most every
    `interval_s` seconds, so logs stay short."""

    def __init__(self, write: Callable[[str], None], *, tty: bool, interval_s: float = 5.0) -> None:
        self._write = write
        self._tty = tty
        self._interval_s = interval_s
        self._phase: str | None = None
        self._last_at = 0.0
        self._open = False
        self._width = 0

    def __call__(self, progress: Progress) -> None:
        text = bar(progress)
        if self._tty:
            if self._phase is not None and progress.phase != self._phase:
                self._write("\n")
            pad = max(0, self._width - len(text))
            self._write("\r" + text + " " * pad)
            self._width = len(text)
            self._open = True
        else:
            now = time.monotonic()
            done = progress.total is not None and progress.done >= progress.total
            if progress.phase != self._phase or done or now - self._last_at >= self._interval_s:
                self._write(text + "\n")
                self._last_at = now
        self._phase = progress.phase

    def finish(self) -> None:
        if self._open:
            self._write("\n")
            self._open = False
        self._phase = None
