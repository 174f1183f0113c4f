"""Unit tests of the run report's verdict and summary table."""

from __future__ import annotations

import json

from faults.checks import CheckResult
from faults.report import CycleResult, RunReport, Totals


def _cycle(scenario: str, ok: bool, ready: float | None, caught: float | None) -> CycleResult:
    journal = CheckResult("journal", ok, "d", {"messages": 10.0})
    cycle = CycleResult(scenario, 1, 0.0, [journal], ready, caught, catch_up_measured=ready is not None)
    cycle.count_journal()
    return cycle


def test_the_table_shows_each_scenario_the_totals_and_every_failure() -> None:
    cycles = [
        _cycle("node-kill", True, 4.0, 6.0),
        _cycle("tree-kill", False, 9.0, None),
        _cycle("fuzz", True, None, None),
    ]
    report = RunReport("short", cycles, Totals(appends_sent=10, messages_acked=14), 30.0)
    lines = report.table().splitlines()
    row = {
        name: next(line for line in lines if line.startswith(name))
        for name in ("node-kill", "tree-kill", "fuzz")
    }
    assert row["node-kill"].split()[-2:] == ["4.0/4.0s", "6.0/6.0s"]
    assert row["tree-kill"].split()[-2:] == ["9.0/9.0s", "never"]
    assert row["fuzz"].split()[-2:] == ["-", "-"]
    assert "  tree-kill #1: journal: d" in lines
    assert any("messages acknowledged 14" in line for line in lines)
    assert lines[-1] == "FAIL" and not report.ok
    assert json.loads(report.to_json())["ok"] is False
    assert report.of("node-kill")[0].journal_messages == 10
