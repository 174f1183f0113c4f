"""Retroactive screening: every stored entry through today's screening rules (`Rescreener`).

Write-time screening (`core.memory.screening`) only sees what is written after a rule changes;
`Rescreener.run` applies today's rules to what is already stored, per entry, key and content:
- **rejected** (`check_rejected`): the entry is quarantined, reason `screening_rejected`;
- **sensitive** (`find_sensitive`) in a `shared` entry: it is made private to its author, as
  write-time screening would have stored it (version bumped, an upsert published); an entry
  without an author is quarantined (`sensitive_without_user`), and so is one whose author already
  has a private entry with that key (`sensitive_key_taken`: merging is the operator's call);
- otherwise it is left alone (sensitive private entries are what write-time screening keeps).

A quarantine moves the entry out of memory (`core.memory.quarantine`) with the reason, the rule,
the field and a sentence, in one transaction with its tombstone on `memory.entries` (the index
drops the point, as for forget and expiry). Nothing is deleted: `release` moves it back (version
bumped, an upsert published), after which the same key and content are not quarantined again
(`released_kept`); a changed entry is screened again.

Every change happens in a block holding the agent's write lock on the entry as stored then
(re-read and re-judged), so a concurrent edit is never overwritten. Entries are read in batches
of `batch_size` by entry_id (keyset): a run resumes after any entry id (`after`), and a second run
changes nothing (the quarantined entries are no longer in memory; the ones made private pass) and
reports the open quarantines as `already_quarantined`. `dry_run` judges without changing anything
(an author's key clash is only found by a real run).
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from core.errors import Conflict, NotFound
from core.memory.clock import Clock, utc_now
from core.memory.models import MemoryEntry
from core.memory.quarantine import QuarantineRecord, QuarantineStore, QuarantineWrites
from core.memory.screening import SENSITIVE_DESCRIPTIONS, ScreeningRejected, check_rejected, find_sensitive
from core.memory.store import Scope, StoredEntry

Action = Literal["keep", "quarantine", "make_private"]
Outcome = Literal["quarantined", "made_private", "already_quarantined", "released_kept"]
OUTCOMES: tuple[Outcome, ...] = ("quarantined", "made_private", "already_quarantined", "released_kept")
DEFAULT_BATCH = 500


@dataclass(frozen=True)
class Verdict:
    """What today's rules say of one stored entry."""

    action: Action
    reason: str = ""
    rule: str = ""
    field: str = ""
    detail: str = ""


KEEP = Verdict("keep")


def judge(entry: MemoryEntry) -> Verdict:
    """Today's screening of a stored entry (module doc). Pure."""
    try:
        check_rejected(entry.key, field="key")
        check_rejected(entry.content, field="content")
    except ScreeningRejected as exc:
        return Verdict("quarantine", "screening_rejected", exc.pattern, exc.field or "content", exc.message)
    if entry.visibility != "shared":
        return KEEP
    for name, text in (("key", entry.key), ("content", entry.content)):
        found = find_sensitive(text)
        if not found:
            continue
        what = ", ".join(SENSITIVE_DESCRIPTIONS[rule] for rule in found)
        detail = f"the shared entry's {name} contains {what}, which may only be stored privately"
        if entry.author_user_id is None:
            return Verdict(
                "quarantine",
                "sensitive_without_user",
                found[0],
                name,
                detail + "; the entry has no author to make it private to",
            )
        return Verdict("make_private", "sensitive", found[0], name, detail)
    return KEEP


def _made_private(verdict: Verdict, entry: MemoryEntry) -> Verdict:
    """A `make_private` verdict, its detail saying to whom."""
    return dataclasses.replace(
        verdict, detail=f"{verdict.detail}; made private to its author {entry.author_user_id!r}"
    )


def released_kept(entry: MemoryEntry, release: QuarantineRecord | None) -> bool:
    """Whether an operator released this very entry (same key and content) from quarantine."""
    if release is None:
        return False
    was = release.stored.entry
    return (was.key, was.content) == (entry.key, entry.content)


@dataclass(frozen=True)
class Affected:
    """One entry a run quarantined, made private, found quarantined or left as released."""

    entry_id: str
    account_id: str
    agent_id: str
    user_id: str | None
    key: str
    outcome: Outcome
    reason: str
    rule: str
    field: str
    detail: str


@dataclass
class RescreenReport:
    """What a run found and did (counts per outcome and per rule, and each affected entry)."""

    environment: str
    account_id: str | None
    dry_run: bool
    total: int = 0
    """The entries in scope when the run started (progress only: entries come and go meanwhile)."""
    scanned: int = 0
    passed: int = 0
    outcomes: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    rules: dict[str, int] = field(default_factory=dict)
    affected: list[Affected] = field(default_factory=list)
    last_entry_id: str | None = None
    """The last entry id scanned: `after` resumes a run from there."""
    seconds: float = 0.0

    def add(self, entry: MemoryEntry, outcome: Outcome, verdict: Verdict) -> None:
        self.outcomes[outcome] += 1
        self.rules[verdict.rule] = self.rules.get(verdict.rule, 0) + 1
        self.affected.append(
            Affected(
                entry_id=entry.entry_id,
                account_id=entry.account_id,
                agent_id=entry.agent_id,
                user_id=entry.user_id,
                key=entry.key,
                outcome=outcome,
                reason=verdict.reason,
                rule=verdict.rule,
                field=verdict.field,
                detail=verdict.detail,
            )
        )


def record_verdict(record: QuarantineRecord) -> Verdict:
    return Verdict("quarantine", record.reason, record.rule, record.field, record.detail)


class Rescreener:
    """Runs retroactive screening over a `QuarantineStore` (module doc)."""

    def __init__(self, store: QuarantineStore, clock: Clock = utc_now) -> None:
        self._store = store
        self._clock = clock

    async def run(
        self,
        environment: str,
        *,
        account_id: str | None = None,
        dry_run: bool = False,
        after: uuid.UUID | None = None,
        batch_size: int = DEFAULT_BATCH,
        progress: Callable[[RescreenReport], None] = lambda _: None,
    ) -> RescreenReport:
        """Screen every entry of `environment` (or of one account) with id > `after`; calls
        `progress(report)` after each batch."""
        started = time.monotonic()
        report = RescreenReport(environment, account_id, dry_run)
        report.total = await self._store.count(environment, account_id, after=after)
        await self._already_quarantined(report, batch_size)
        cursor = after
        while True:
            batch = await self._store.scan(environment, account_id, after=cursor, limit=batch_size)
            if not batch:
                break
            flagged = [(stored, judge(stored.entry)) for stored in batch]
            flagged = [(stored, verdict) for stored, verdict in flagged if verdict.action != "keep"]
            releases = (
                await self._store.released(environment, [_uid(s.entry) for s, _ in flagged])
                if flagged
                else {}
            )
            acted = 0
            for stored, verdict in flagged:
                release = releases.get(_uid(stored.entry))
                if dry_run:
                    outcome, final = _planned(stored.entry, verdict, release)
                    report.add(stored.entry, outcome, final)
                    acted += 1
                    continue
                done = await self._apply(stored, release)
                if done is not None:
                    report.add(*done)
                    acted += 1
            report.scanned += len(batch)
            report.passed += len(batch) - acted
            cursor = _uid(batch[-1].entry)
            report.last_entry_id = str(cursor)
            report.seconds = time.monotonic() - started
            progress(report)
            if len(batch) < batch_size:
                break
        report.seconds = time.monotonic() - started
        return report

    async def _already_quarantined(self, report: RescreenReport, batch_size: int) -> None:
        cursor: uuid.UUID | None = None
        while True:
            records = await self._store.open_records(
                report.environment, report.account_id, after=cursor, limit=batch_size
            )
            for record in records:
                report.add(record.stored.entry, "already_quarantined", record_verdict(record))
            if len(records) < batch_size:
                return
            cursor = _uid(records[-1].stored.entry)

    async def _apply(
        self, scanned: StoredEntry, release: QuarantineRecord | None
    ) -> tuple[MemoryEntry, Outcome, Verdict] | None:
        """Judge the entry again as stored now, under its agent's lock, and act (module doc)."""
        e = scanned.entry
        async with self._store.writing(e.environment, e.account_id, e.agent_id) as tx:
            current = await tx.lock(_uid(e))
            if current is None:
                return None
            entry = current.entry
            verdict = judge(entry)
            if verdict.action == "keep":
                return None
            if released_kept(entry, release):
                return entry, "released_kept", verdict
            if verdict.action == "make_private":
                made = await self._make_private(tx, current)
                if made is not None:
                    return made.entry, "made_private", _made_private(verdict, entry)
                verdict = Verdict(
                    "quarantine",
                    "sensitive_key_taken",
                    verdict.rule,
                    verdict.field,
                    f"{verdict.detail}; its author {entry.author_user_id!r} already has a private entry with "
                    f"the key {entry.key!r}",
                )
            await tx.quarantine(
                QuarantineRecord(
                    stored=current,
                    reason=verdict.reason,
                    rule=verdict.rule,
                    field=verdict.field,
                    detail=verdict.detail,
                    quarantined_at=self._clock(),
                )
            )
            await tx.publish([entry])
            return entry, "quarantined", verdict

    async def _make_private(self, tx: QuarantineWrites, current: StoredEntry) -> StoredEntry | None:
        """The entry made private to its author; None when the author's private key is taken."""
        e = current.entry
        owner = Scope(e.environment, e.account_id, e.agent_id, e.author_user_id)
        if await tx.find_by_key(owner, e.key, "private") is not None:
            return None
        stored = await tx.update(
            e.model_copy(
                update={"visibility": "private", "user_id": e.author_user_id, "updated_at": self._clock()}
            )
        )
        await tx.publish([stored])
        return stored

    async def release(self, environment: str, entry_id: str, *, account_id: str | None = None) -> MemoryEntry:
        """Move a quarantined entry back into memory (version bumped, an upsert published).
        NotFound when it has no open quarantine (in `account_id`, when given); Conflict when its
        key has been taken meanwhile in its visibility scope (forget or edit that entry first)."""
        uid = _parse_id(entry_id)
        found = await self._store.find_open(environment, uid)
        if found is None or (account_id is not None and found.stored.entry.account_id != account_id):
            raise NotFound(
                f"entry {entry_id} is not quarantined" + (f" in account {account_id}" if account_id else "")
            )
        e = found.stored.entry
        async with self._store.writing(e.environment, e.account_id, e.agent_id) as tx:
            record = await tx.open_record(environment, uid)
            if record is None:
                raise NotFound(f"entry {entry_id} is not quarantined (released meanwhile)")
            e = record.stored.entry
            clash = await tx.find_by_key(
                Scope(e.environment, e.account_id, e.agent_id, e.user_id), e.key, e.visibility
            )
            if clash is not None:
                raise Conflict(
                    f"cannot release entry {entry_id}: its key {e.key!r} is now used by {e.visibility} entry "
                    f"{clash.entry.entry_id} (forget or edit that one first)"
                )
            restored = await tx.restore(record, self._clock())
            await tx.publish([restored])
        return restored.entry


def _planned(
    entry: MemoryEntry, verdict: Verdict, release: QuarantineRecord | None
) -> tuple[Outcome, Verdict]:
    """What a real run would most likely do (a dry run; module doc)."""
    if released_kept(entry, release):
        return "released_kept", verdict
    if verdict.action == "make_private":
        return "made_private", _made_private(verdict, entry)
    return "quarantined", verdict


def _uid(entry: MemoryEntry) -> uuid.UUID:
    return uuid.UUID(entry.entry_id)


def _parse_id(entry_id: str) -> uuid.UUID:
    try:
        return uuid.UUID(entry_id)
    except ValueError:
        raise NotFound(f"entry {entry_id!r} is not quarantined (not an entry id)") from None
