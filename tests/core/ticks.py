"""A monotonic clock for cache tests: returns `now`, set by the test."""

from __future__ import annotations


class Ticks:
    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
