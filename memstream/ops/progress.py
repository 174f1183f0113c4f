"""Progress of a long-running operation, reported as it goes (the CLI draws a bar from it)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Progress:
    """`done` of `total` (None: unknown) units of `phase`; `detail`: a short human line;
    `figures`: numbers worth showing (e.g. {"lag": 120, "rows_per_s": 5300})."""

    phase: str
    done: int
    total: int | None = None
    detail: str = ""
    figures: dict[str, float] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


ProgressCallback = Callable[[Progress], None]
"""Called from the event loop; must not block."""


def no_progress(_: Progress) -> None:
    """A ProgressCallback that ignores everything."""
