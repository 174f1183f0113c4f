"""Results of a run: one `CycleResult` per scenario run, the totals, and the summary table."""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from faults.checks import CheckResult


@dataclass
class CycleResult:
    """One scenario run: its checks and figures. `ready_s`/`caught_up_s` count from the fault."""

    scenario: str
    index: int
    started_at: float
    checks: list[CheckResult] = field(default_factory=list)
    ready_s: float | None = None
    caught_up_s: float | None = None
    catch_up_measured: bool = False
    journal_messages: int = 0
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return all(check.ok for check in self.checks)

    def count_journal(self) -> None:
        """`journal_messages` from the journal check's figures."""
        journal = next((c for c in self.checks if c.name == "journal"), None)
        self.journal_messages = int(journal.figures.get("messages", 0)) if journal else 0

    def failures(self) -> list[CheckResult]:
        return [check for check in self.checks if not check.ok]


@dataclass
class Totals:
    appends_sent: int = 0
    messages_acked: int = 0
    lost: int = 0
    duplicated: int = 0
    unresolved: int = 0  # outcomes still unknown at the end (present at most once)
    load_5xx: int = 0
    fuzz_requests: int = 0
    fuzz_5xx: int = 0
    harness_restarts: int = 0  # times the harness had to start a stack that did not recover


@dataclass
class RunReport:
    profile: str
    cycles: list[CycleResult]
    totals: Totals
    wall_s: float

    @property
    def ok(self) -> bool:
        return all(cycle.ok for cycle in self.cycles)

    def of(self, scenario: str) -> list[CycleResult]:
        return [cycle for cycle in self.cycles if cycle.scenario == scenario]

    def to_json(self) -> str:
        data: dict[str, Any] = asdict(self)
        data["ok"] = self.ok
        return json.dumps(data, indent=2)

    def table(self) -> str:
        """The summary: one row per scenario, then the totals."""
        header = f"{'scenario':<16} {'runs':>4} {'failed':>6} {'ready p50/max':>15} {'caught-up p50/max':>19}"
        lines = [header, "-" * len(header)]
        for name in dict.fromkeys(cycle.scenario for cycle in self.cycles):
            runs = self.of(name)
            failed = sum(1 for cycle in runs if not cycle.ok)
            lines.append(
                f"{name:<16} {len(runs):>4} {failed:>6} "
                f"{_spread([c.ready_s for c in runs if c.ready_s is not None]):>15} "
                f"{_spread([c.caught_up_s for c in runs if c.catch_up_measured]):>19}"
            )
        t = self.totals
        kills = [c for c in self.cycles if c.scenario in ("node-kill", "tree-kill")]
        lines += [
            "",
            f"kill -9 cycles: {len(kills)}; appends sent {t.appends_sent}, messages acknowledged "
            f"{t.messages_acked}, lost {t.lost}, duplicated {t.duplicated}, unresolved {t.unresolved}",
            f"restart-to-ready p50 {_p50([c.ready_s for c in kills])}, restart-to-caught-up p50 "
            f"{_p50([c.caught_up_s for c in kills if c.catch_up_measured])} (kill -9 cycles)",
            f"5xx: {t.load_5xx} to the load (in outages, with a code), {t.fuzz_5xx} of {t.fuzz_requests} "
            f"fuzz requests; harness restarts {t.harness_restarts}; wall time {self.wall_s:.0f}s",
        ]
        failures = [(c, check) for c in self.cycles for check in c.failures()]
        if failures:
            lines += ["", f"{len(failures)} failed check(s):"]
            lines += [f"  {c.scenario} #{c.index}: {check.name}: {check.detail}" for c, check in failures]
        lines += ["", "PASS" if self.ok else "FAIL"]
        return "\n".join(lines)


def _seconds(values: Sequence[float | None]) -> list[float]:
    return [v for v in values if v is not None]


def _p50(values: Sequence[float | None]) -> str:
    known = _seconds(values)
    return f"{statistics.median(known):.1f}s" if known else "-"


def _spread(values: Sequence[float | None]) -> str:
    """`p50/max` of the measured values; `never` for measurements that never succeeded."""
    known = _seconds(values)
    if not known:
        return "never" if values else "-"
    missing = len(values) - len(known)
    text = f"{statistics.median(known):.1f}/{max(known):.1f}s"
    return text + (f" ({missing} never)" if missing else "")
