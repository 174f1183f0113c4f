"""The processors' part of `/readyz`: one check that fails while a processor is degraded
(crashed, failed, restarting or waiting out an outage; `ProcessorStatus.degraded`), naming each
with what is wrong, and the details of every processor."""

from __future__ import annotations

from memstream.api.schemas import CheckResult, ProcessorHealth
from streams.runtime.status import ProcessorStatus


def processors_check(statuses: list[ProcessorStatus]) -> tuple[CheckResult, dict[str, ProcessorHealth]]:
    """The `processors` check (failing while one is degraded, naming each) and their details."""
    problems = [status.problem or status.name for status in statuses if status.degraded]
    details = {
        status.name: ProcessorHealth(
            state=status.state,
            degraded=status.degraded,
            error=status.error,
            restarts=status.restarts,
            restart_in_s=_rounded(status.restart_in_s),
            outage=status.outage,
            outage_s=_rounded(status.outage_s),
        )
        for status in statuses
    }
    return CheckResult(ok=not problems, error="; ".join(problems) or None), details


def _rounded(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 1)
