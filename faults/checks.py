"""The invariants checked after every fault, and the readers that gather what they look at.

Readers go through the stack's own interfaces: the journal through `GET /v1/threads/{id}/messages`
(the API's durable read), the projection through `memstream verify` (`/admin/v1/verify` with the
node's admin token, `memstream.ops.node_client`), the processors through `/admin/v1/processors`,
summaries through their objects in the stack's local object store (`core.summaries.models` keys and
parser) and the compaction guards through Redis (`sinks.redis.thresholds` key layout). The checks
themselves (`check_*`) judge what was read and the `Ledger`, each answering a `CheckResult`.
The compaction checks are in `faults.compaction_checks`.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from bench.topic_consumer import consumer_from_start
from core.config import Settings
from faults.ledger import LedgerView, ServerError
from memstream.ops.node_client import NodeClient, run_stream
from memstream.wiring.processors import enabled
from streams.topics import load_topics


@dataclass(frozen=True)
class CheckResult:
    name: str
    ok: bool
    detail: str
    figures: dict[str, float] = field(default_factory=dict)


# ---------------------------------------------------------------- journal


@dataclass(frozen=True)
class JournalRow:
    offset: int
    message_id: str
    role: str
    content: str
    tool_call: dict[str, Any] | None
    token_count: int


def read_journal(url: str, api_key: str, thread_ids: Iterable[str]) -> dict[str, list[JournalRow]]:
    """Every message of each thread, in offset order (an unknown thread has none)."""
    out: dict[str, list[JournalRow]] = {}
    headers = {"Authorization": f"Bearer {api_key}"}
    with httpx.Client(base_url=url, headers=headers, timeout=30) as client:
        for thread_id in thread_ids:
            rows: list[JournalRow] = []
            after = -1
            while True:
                response = client.get(
                    f"/v1/threads/{thread_id}/messages", params={"after": after, "limit": 1000}
                )
                if response.status_code == 404:
                    break
                response.raise_for_status()
                page = response.json()["messages"]
                if not page:
                    break
                rows.extend(
                    JournalRow(
                        offset=m["offset"],
                        message_id=m["message_id"],
                        role=m["role"],
                        content=m.get("content") or "",
                        tool_call=m.get("tool_call"),
                        token_count=m["token_count"],
                    )
                    for m in page
                )
                after = page[-1]["offset"]
            out[thread_id] = rows
    return out


def _plain(value: Any) -> Any:
    """A JSON value without null members (the API answers absent optional fields as null)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if v is not None}
    return value


def same_message(body: Mapping[str, Any], row: JournalRow) -> bool:
    """True when the journal row holds what `body` (a sent NewMessage) asked to store."""
    return (
        body["role"] == row.role
        and (body.get("content") or "") == row.content
        and _plain(body.get("tool_call")) == _plain(row.tool_call)
    )


def check_journal(view: LedgerView, journal: Mapping[str, Sequence[JournalRow]]) -> CheckResult:
    """Every acknowledged append once, at its acknowledged offset, with its content; gap-free offsets;
    unknown outcomes at most once; nothing in the load's threads that the load did not send."""
    problems: list[str] = []
    occurrences = Counter(row.message_id for rows in journal.values() for row in rows)
    duplicated = sorted(mid for mid, n in occurrences.items() if n > 1)
    gaps = []
    where: dict[str, tuple[str, JournalRow]] = {}
    for thread_id, rows in journal.items():
        offsets = [row.offset for row in rows]
        if offsets != list(range(len(rows))):
            gaps.append(thread_id)
        for row in rows:
            where.setdefault(row.message_id, (thread_id, row))
    lost, moved, phantom = [], [], []
    unknown_present = unknown_absent = 0
    for sent in view.messages.values():
        found = where.get(sent.message_id)
        if sent.outcome == "acked":
            if found is None:
                lost.append(sent.message_id)
            elif (
                found[0] != sent.thread_id
                or found[1].offset != sent.offset
                or not same_message(sent.body, found[1])
            ):
                moved.append(sent.message_id)
        elif sent.outcome == "unknown":
            if found is None:
                unknown_absent += 1
            else:
                unknown_present += 1
        elif found is not None:  # rejected, yet stored
            phantom.append(sent.message_id)
    phantom += [mid for mid in where if mid not in view.messages]
    acked = sum(1 for sent in view.messages.values() if sent.outcome == "acked")
    for label, items in (
        ("acknowledged but missing", lost),
        ("acknowledged but at another offset or with other content", moved),
        ("in the journal more than once", duplicated),
        ("in the journal though never sent or rejected", phantom),
    ):
        if items:
            problems.append(f"{len(items)} {label} (e.g. {', '.join(items[:3])})")
    if gaps:
        problems.append(f"{len(gaps)} thread(s) with offsets that are not 0..n-1 (e.g. {gaps[0]})")
    figures = {
        "acked": float(acked),
        "lost": float(len(lost) + len(moved)),
        "duplicated": float(len(duplicated)),
        "unknown_present": float(unknown_present),
        "unknown_absent": float(unknown_absent),
        "messages": float(sum(len(rows) for rows in journal.values())),
    }
    detail = "; ".join(problems) or (
        f"{acked} acknowledged messages present once, offsets gap-free in {len(journal)} threads"
        + (
            f" ({unknown_present + unknown_absent} unresolved: {unknown_present} present)"
            if unknown_absent
            else ""
        )
    )
    return CheckResult("journal", not problems, detail, figures)


def check_rejections(view: LedgerView, since: float) -> CheckResult:
    """The load's requests are valid: a 4xx answer to one (sent after `since`) is a defect."""
    rejected = [s for s in view.messages.values() if s.outcome == "rejected" and s.first_sent >= since]
    if not rejected:
        return CheckResult("no 4xx to valid appends", True, "none")
    reasons = Counter((s.rejection or "?")[:120] for s in rejected)
    top = "; ".join(f"{n}x {reason}" for reason, n in reasons.most_common(3))
    return CheckResult("no 4xx to valid appends", False, f"{len(rejected)} message(s) rejected: {top}")


# ---------------------------------------------------------------- projection and processors


def verify(url: str, admin_token: str, settle_s: float) -> dict[str, Any]:
    """`memstream verify` against the node at `url` (waits up to `settle_s` for lag to resolve)."""
    with NodeClient(url, admin_token, read_timeout_s=settle_s + 60) as node:
        report: dict[str, Any] = run_stream(
            node.stream("GET", "/admin/v1/verify", params={"settle_s": settle_s}), lambda _: None
        )
    return report


def check_projection(report: Mapping[str, Any], injected: Iterable[str] = ()) -> CheckResult:
    """`memstream verify` found the projection holding the journal: no difference but a thread the
    harness itself put on the topic without the journal (`injected`, projection-only), nothing pending."""
    figures = {"journal_messages": float(report.get("journal_messages", 0))}
    skip = set(injected)
    diffs = [
        d
        for d in report.get("differences") or []
        if not (d["kind"] == "unknown_thread" and d["thread_id"] in skip)
    ]
    if not diffs and not report.get("pending_messages"):
        return CheckResult(
            "memstream verify",
            True,
            f"projection matches the journal ({report.get('journal_messages')} messages, "
            f"{report.get('journal_threads')} threads)",
            figures,
        )
    sample = ", ".join(
        f"{d['thread_id']!r} {d['kind']} ({d['journal']} vs {d['projection']})" for d in diffs[:3]
    )
    return CheckResult(
        "memstream verify",
        False,
        f"{len(diffs)} thread(s) differ, {report.get('pending_messages', 0)} message(s) pending"
        + (f": {sample}" if sample else ""),
        figures,
    )


def check_processors(url: str, admin_token: str, *, wait_s: float = 45.0) -> CheckResult:
    """Every processor of the node `running`, waiting up to `wait_s` (a restarted node's processors
    are `starting` until their consumer groups joined)."""
    deadline = time.monotonic() + wait_s
    with NodeClient(url, admin_token) as node:
        while True:
            states = {p["name"]: p["state"] for p in node.get("/admin/v1/processors")}
            bad = {name: state for name, state in states.items() if state != "running"}
            if not bad or time.monotonic() >= deadline:
                break
            time.sleep(1.0)
    if bad:
        return CheckResult("processors running", False, ", ".join(f"{n} {s}" for n, s in sorted(bad.items())))
    return CheckResult("processors running", True, f"{len(states)} running")


def journal_consumers(settings: Settings) -> list[str]:
    """The processors consuming `journal.messages` that run with `settings` (topics.yaml names
    their modules; an opt-in processor switched off consumes nothing)."""
    modules = load_topics().get("journal.messages").consumers
    names = [module.rsplit(".", 1)[-1].replace("_", "-") for module in modules]
    return [name for name in names if enabled(name, settings)]


def dead_lettered(settings: Settings, processors: Iterable[str], needle: str) -> dict[str, int]:
    """How many records of each processor's dead-letter topic mention `needle` (read from the start)."""
    found = {}
    for processor in processors:
        consumer = consumer_from_start(settings, f"dlq.{processor}")
        try:
            count = 0
            while True:
                batch = consumer.consume(500, 1.0)
                if not batch:
                    break
                count += sum(1 for m in batch if m.error() is None and needle.encode() in (m.value() or b""))
            found[processor] = count
        finally:
            consumer.close()
    return found


# ---------------------------------------------------------------- server errors


@dataclass(frozen=True)
class Window:
    """An injected outage: 5xx answers with a specific code are expected between `start` and `end`."""

    start: float
    end: float


def check_server_errors(errors: Sequence[ServerError], windows: Sequence[Window]) -> CheckResult:
    """5xx only inside an outage window and each with a specific error code; never a 500."""
    bad = []
    for error in errors:
        inside = any(w.start <= error.at <= w.end for w in windows)
        if error.status == 500 or error.code in (None, "internal_error"):
            bad.append(f"{error.status} {error.code} on {error.method} {error.path}")
        elif not inside:
            bad.append(f"{error.status} {error.code} outside an outage on {error.method} {error.path}")
    counts = Counter(f"{e.status} {e.code}" for e in errors)
    summary = ", ".join(f"{n}x {what}" for what, n in counts.most_common()) or "none"
    if bad:
        return CheckResult(
            "5xx only in outages, with a code",
            False,
            f"{len(bad)} bad: {'; '.join(bad[:3])} (all 5xx: {summary})",
            {"server_errors": float(len(errors))},
        )
    return CheckResult(
        "5xx only in outages, with a code", True, summary, {"server_errors": float(len(errors))}
    )
