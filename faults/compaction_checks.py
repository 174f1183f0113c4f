"""The compaction invariant checked after every fault: summaries through their objects in the stack's
local object store (`core.summaries.models` keys and parser), guards through Redis
(`sinks.redis.thresholds` key layout).

The compaction rule (`over_threshold`) is the `thresholds` processor's own (`processors.thresholds.
advance`): a thread is *stranded* when the messages after its latest summary (all of them when it
has none) reach 2,000 tokens or 50 messages once the stack had time to settle with no new appends,
or when a flush-and-summarize guard is still held then: every compaction must finish, and a thread
over the thresholds must get its summary.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import redis

from core.stores.thresholds import ThreadScope
from core.summaries.models import SummaryUnavailable, parse_summary, summary_key
from faults.checks import CheckResult, JournalRow
from faults.ledger import Conversation
from processors.thresholds import Counters, advance
from sinks.redis.thresholds import GUARD_TTL_S


@dataclass(frozen=True)
class SummaryInfo:
    version: int
    last_message_offset: int
    written_at: float  # epoch seconds


def read_summaries(
    objects_root: Path, environment: str, account_id: str, conversations: Iterable[Conversation]
) -> dict[str, SummaryInfo | None]:
    """The latest summary of each conversation in a local object store (None: none yet).

    A summary object that exists but cannot be parsed is reported as version -1 (a defect)."""
    out: dict[str, SummaryInfo | None] = {}
    for c in conversations:
        key = summary_key(environment, account_id, c.agent_id, c.thread_id)
        try:
            raw = (objects_root / key).read_bytes()
        except FileNotFoundError:
            out[c.thread_id] = None
            continue
        try:
            summary = parse_summary(raw, key)
        except SummaryUnavailable:
            out[c.thread_id] = SummaryInfo(-1, -1, 0.0)
            continue
        out[c.thread_id] = SummaryInfo(
            summary.version, summary.last_message_offset, summary.timestamp.timestamp()
        )
    return out


def over_threshold(rows: Sequence[JournalRow], after_offset: int) -> int | None:
    """Offset of the message at which the messages after `after_offset` reach a compaction
    threshold (the `thresholds` processor's rule), or None while they do not."""
    counters = Counters(tokens=0, messages=0)
    for row in rows:
        if row.offset <= after_offset:
            continue
        counters, reason = advance(counters, row.token_count)
        if reason is not None:
            return row.offset
    return None


def stranded_threads(
    journal: Mapping[str, Sequence[JournalRow]], summaries: Mapping[str, SummaryInfo | None]
) -> dict[str, str]:
    """Threads over the thresholds since their latest summary, each with what is wrong."""
    out = {}
    for thread_id, rows in journal.items():
        summary = summaries.get(thread_id)
        if summary is not None and summary.version < 0:
            out[thread_id] = "its summary object cannot be parsed"
            continue
        covered = summary.last_message_offset if summary is not None else -1
        crossed = over_threshold(rows, covered)
        if crossed is None:
            continue
        last = rows[-1].offset
        if summary is None:
            out[thread_id] = f"crossed a threshold at offset {crossed} (of {last}) and has no summary"
        else:
            out[thread_id] = (
                f"crossed a threshold at offset {crossed} (of {last}) after summary v{summary.version} "
                f"(covering up to {covered})"
            )
    return out


def versions_backwards(previous: Mapping[str, int], summaries: Mapping[str, SummaryInfo | None]) -> list[str]:
    """Threads whose summary version is lower than one seen before (or vanished)."""
    out = []
    for thread_id, seen in previous.items():
        now = summaries.get(thread_id)
        version = now.version if now is not None else 0
        if version < seen:
            out.append(f"{thread_id} v{seen} -> v{version}")
    return out


def read_guards(
    redis_url: str, namespace: str, environment: str, account_id: str, conversations: Iterable[Conversation]
) -> dict[str, float]:
    """Held flush-and-summarize guards: thread -> seconds held (from the lease left). `namespace` is
    the deployment's (`memstream.wiring.processors.threshold_namespace`); keys as
    `RedisThresholdStore.guard_key`."""
    client = redis.Redis.from_url(redis_url, socket_timeout=5)
    try:
        held = {}
        for c in conversations:
            scope = ThreadScope(environment, account_id, c.agent_id, c.thread_id)
            left_ms = client.pttl(f"{scope.prefix(namespace)}/guard")
            if isinstance(left_ms, int) and left_ms >= 0:
                held[c.thread_id] = GUARD_TTL_S - left_ms / 1000
        return held
    finally:
        client.close()


def check_compaction(
    summaries: Mapping[str, SummaryInfo | None],
    stranded: Mapping[str, str],
    guards: Mapping[str, float],
    backwards: Sequence[str],
    settle_s: float,
) -> CheckResult:
    problems = []
    if stranded:
        first = next(iter(sorted(stranded.items())))
        problems.append(f"{len(stranded)} thread(s) stranded after {settle_s:.0f}s: {first[0]} {first[1]}")
    if guards:
        oldest = max(guards.items(), key=lambda item: item[1])
        problems.append(f"{len(guards)} guard(s) still held (oldest {oldest[0]}: {oldest[1]:.0f}s)")
    if backwards:
        problems.append(f"summary version went backwards: {', '.join(backwards[:3])}")
    summarised = {t: s for t, s in summaries.items() if s is not None}
    versions = sum(s.version for s in summarised.values())
    return CheckResult(
        "no stranded compaction",
        not problems,
        "; ".join(problems)
        or f"every thread over the thresholds is summarised ({len(summarised)} threads, {versions} "
        "summary versions), no guard held",
        {"stranded": float(len(stranded)), "guards": float(len(guards)), "summaries": float(versions)},
    )
