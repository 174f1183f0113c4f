"""What `ProcessorSupervisor.status` says about one processor: its state, last crash, restarts, and
the outage its batch is waiting out (`degraded`, `problem`: what `/readyz` reports)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

State = Literal["starting", "running", "paused", "crashed", "failed", "stopped"]


@dataclass(frozen=True)
class ProcessorStatus:
    name: str
    group_id: str
    source_topics: tuple[str, ...]  # broker-side names
    declared_topics: tuple[str, ...]  # as declared in topics.yaml
    state: State
    error: str | None = None
    """The last crash (or failed start), kept after a successful restart; None if it never crashed."""
    restarts: int = 0
    """Restarts after crashes so far."""
    restart_in_s: float | None = None
    """Crashed: seconds until the next restart attempt."""
    restarting: bool = False
    """Starting again after a crash."""
    outage: str | None = None
    """Running, but its batch waits for an unavailable store or broker: the last error."""
    outage_s: float | None = None
    """How long it has been waiting for it."""

    @property
    def degraded(self) -> bool:
        """Not doing its work right now: crashed, failed, restarting or waiting out an outage."""
        return self.state in ("crashed", "failed") or self.restarting or self.outage is not None

    @property
    def problem(self) -> str | None:
        """What is wrong, in one line (None when not degraded)."""
        if self.state == "failed":
            return f"{self.name} cannot run and is not restarted: {self.error}"
        if self.state == "crashed":
            due = f" in {self.restart_in_s:.0f}s" if self.restart_in_s is not None else ""
            return f"{self.name} crashed and restarts{due} (restarts so far: {self.restarts}): {self.error}"
        if self.restarting:
            return f"{self.name} is restarting after a crash: {self.error}"
        if self.outage is not None:
            waited = self.outage_s or 0.0
            return f"{self.name} has been waiting {waited:.0f}s for an unavailable store: {self.outage}"
        return None
