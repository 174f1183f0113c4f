"""The fault suite's short profile, as CI runs it: one real `memstream up` under load through every
scenario once (kill -9 of the node, of the whole tree and of the supervisor; broker - twice - and
PostgreSQL killed; Redis wiped; schemathesis and crafted requests), then the second-writer phase.

The profile runs once for the module (about 5 minutes on an idle 2-core machine); each scenario is
its own test so a failure names the scenario and its failed checks. The long profile is
`python -m faults run --long` (README, "Fault suite").
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from faults.profiles import SHORT
from faults.report import RunReport
from faults.run import Run

pytestmark = [pytest.mark.timeout(2400), pytest.mark.engine]  # its `report` fixture runs `memstream up`

SCENARIOS = [*dict.fromkeys(SHORT.plan), "second-writer"]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunReport]:
    work: Path = tmp_path_factory.mktemp("faults")
    result = Run(SHORT, work, say=lambda line: print(line, flush=True)).execute()
    (work / "report.json").write_text(result.to_json())
    print(result.table())
    yield result


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenario_passes_every_check(report: RunReport, scenario: str) -> None:
    cycles = report.of(scenario)
    assert cycles, f"{scenario} did not run (an earlier failure aborted the run?): {report.table()}"
    failures = [f"{c.scenario} #{c.index}: {x.name}: {x.detail}" for c in cycles for x in c.failures()]
    assert not failures, "\n".join(failures)


def test_no_acknowledged_append_is_lost_or_duplicated(report: RunReport) -> None:
    totals = report.totals
    assert totals.messages_acked > 1000, f"too little load to judge: {totals}"
    assert totals.lost == 0 and totals.duplicated == 0, totals


def test_the_stacks_recovered_without_the_harness(report: RunReport) -> None:
    assert report.totals.harness_restarts == 0, [n for c in report.cycles for n in c.notes]
