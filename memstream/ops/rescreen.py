"""`memstream rescreen`: retroactive screening (`core.memory.rescreen.Rescreener`) against the
configured Postgres, on a pool of its own (like `memstream hygiene`: it needs no node).

Quarantines and visibility changes are written with their `memory.entries` outbox rows; the node's
entries relay publishes them (the Qdrant projection drops or updates the points), and the
`pinned_notify` trigger tells every node to evict its cached pinned facts. `render_report` is the
human table of a report (pure).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence

from core.config import Settings
from core.memory.clock import Clock, utc_now
from core.memory.models import MemoryEntry
from core.memory.rescreen import DEFAULT_BATCH, OUTCOMES, Rescreener, RescreenReport
from memstream.ops.progress import Progress, ProgressCallback, no_progress
from sinks.postgres.migrations import migrate
from sinks.postgres.pool import create_pool
from sinks.postgres.quarantine import PostgresQuarantineStore

OUTCOME_LABELS = {
    "quarantined": "quarantined",
    "made_private": "made private",
    "already_quarantined": "already quarantined",
    "released_kept": "released (kept)",
}


async def rescreen_once(
    settings: Settings,
    *,
    account_id: str | None = None,
    dry_run: bool = False,
    after: uuid.UUID | None = None,
    batch_size: int = DEFAULT_BATCH,
    progress: ProgressCallback = no_progress,
    clock: Clock = utc_now,
) -> RescreenReport:
    """One run over `settings.environment` (schema migrated first, idempotent)."""
    pool = await create_pool(settings.postgres, max_size=2)
    started = time.monotonic()

    def batch_done(report: RescreenReport) -> None:
        elapsed = time.monotonic() - started
        acted = sum(report.outcomes[o] for o in ("quarantined", "made_private"))
        progress(
            Progress(
                "rescreen",
                report.scanned,
                max(report.total, report.scanned),
                f"{acted} changed, last {report.last_entry_id}",
                {"entries_per_s": round(report.scanned / elapsed) if elapsed else 0},
            )
        )

    try:
        await migrate(pool)
        return await Rescreener(PostgresQuarantineStore(pool), clock).run(
            settings.environment,
            account_id=account_id,
            dry_run=dry_run,
            after=after,
            batch_size=batch_size,
            progress=batch_done,
        )
    finally:
        await pool.close()


async def release_entries(
    settings: Settings, entry_ids: Sequence[str], *, account_id: str | None = None, clock: Clock = utc_now
) -> list[MemoryEntry]:
    """Move each quarantined entry back into memory, in order; the first failure (`NotFound`,
    `Conflict`) stops and raises (the ones before it stay released)."""
    pool = await create_pool(settings.postgres, max_size=2)
    try:
        await migrate(pool)
        rescreener = Rescreener(PostgresQuarantineStore(pool), clock)
        return [
            await rescreener.release(settings.environment, entry_id, account_id=account_id)
            for entry_id in entry_ids
        ]
    finally:
        await pool.close()


def render_report(report: RescreenReport) -> list[str]:
    """The human table: totals, counts per outcome and per rule, then one line per entry."""
    scope = f"environment {report.environment}" + (
        f", account {report.account_id}" if report.account_id else ""
    )
    lines = [
        ("dry run (nothing was changed): " if report.dry_run else "")
        + f"rescreened {report.scanned} entries of {scope} in {report.seconds:.1f}s: {report.passed} passed"
    ]
    lines.append(", ".join(f"{OUTCOME_LABELS[o]} {report.outcomes[o]}" for o in OUTCOMES))
    if report.rules:
        lines.append("by rule: " + ", ".join(f"{rule} {n}" for rule, n in sorted(report.rules.items())))
    if report.affected:
        header = ("ENTRY ID", "ACCOUNT", "AGENT", "OUTCOME", "RULE", "REASON")
        rows = [
            (
                a.entry_id,
                a.account_id,
                a.agent_id,
                OUTCOME_LABELS[a.outcome],
                f"{a.rule} ({a.field})",
                a.reason,
            )
            for a in report.affected
        ]
        widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header) - 1)]
        for row in (header, *rows):
            lines.append("  ".join([*(c.ljust(w) for c, w in zip(row, widths, strict=False)), row[-1]]))
    return lines
