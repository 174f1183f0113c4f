"""`memstream import`: an account export (`memstream.ops.export_format`) written into an account of
this node, idempotently (run inside the node, like the export).

The whole file is parsed and checked first (`read_export`): a malformed file writes nothing. Then,
in the file's order:
- **agents**: a capability record is inserted with its timestamps; one already there counts as
  unchanged when its capabilities are the file's, else as a conflict (it is left as it is);
- **threads**: inserted with their timestamps and metadata; an existing thread of another agent or
  user is a conflict and its messages and summaries are skipped; other metadata is a conflict that
  keeps the target's metadata and goes on with the messages;
- **messages**: those the thread already holds at their offsets (same id, content and time) are
  unchanged; a message the target holds otherwise at its offset is a conflict that skips the
  thread's messages and summaries;
- **summaries** (before the thread's new messages, so the thresholds count the new messages from
  the summary instead of compacting again what it covers): every version the target lacks is
  written through the summarizer's store (version floor and cache kept right); a version the target
  holds with another content, or one below the target's current version, is a conflict that skips
  the thread's later versions;
- then the messages the thread lacks are appended through the journal (durable before the call
  returns, the journal's message-id retry rules apply) with their original `created_at`, and must
  land at the file's offsets; a refusal (e.g. the id is used by another thread of the account) is a
  conflict that skips the thread's later messages, while an outage (`OUTAGES`: the journal away,
  the thread's shard moving between nodes) stops the import with its error (running it again
  adds what is missing);
- **memory entries**: `core.memory.restore.EntryRestorer` (kept ids and counters, outbox record,
  today's screening: a screened-out entry is reported and not imported).

A conflict never aborts the import: it is reported (`ImportReport.conflicts`) and the rest goes on,
so one run shows every conflict; the report's `ok` is false then. Running the same import again
adds nothing (everything is unchanged).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from core.errors import JournalFenced, JournalUnavailable, MemstreamError, StoreUnavailable
from core.journal.models import Message
from core.memory.checks import content_hash
from core.memory.models import MemoryEntry
from core.memory.restore import EntryRestorer
from core.summaries.models import Summary
from core.threads import Thread
from memstream.ops.account_export import AccountStores
from memstream.ops.export_format import (
    AgentLine,
    MemoryEntryLine,
    MessageLine,
    ParsedExport,
    SummaryLine,
    ThreadRecords,
    read_export,
)
from memstream.ops.progress import Progress, ProgressCallback, no_progress

APPEND_BATCH = 100
"""Messages per journal append (a run of one agent and user; the journal takes at most 1000)."""
OUTAGES = (StoreUnavailable, JournalUnavailable, JournalFenced)
"""Journal errors that say nothing about the data (a store away, the thread's shard moving between
nodes: `ShardNotLocal`): the import stops with them instead of reporting a conflict."""


def _counts() -> dict[str, int]:
    return dict.fromkeys(("agent", "thread", "message", "summary", "memory_entry"), 0)


@dataclass
class ImportReport:
    """What an import did: per type, records added and already there (unchanged); entries given
    another id (`renumbered`: their id belongs to another tenant), entries today's screening keeps
    out (`screened`), and every conflict (`{"type", "id", "detail"}`)."""

    account_id: str
    added: dict[str, int] = field(default_factory=_counts)
    unchanged: dict[str, int] = field(default_factory=_counts)
    renumbered: list[dict[str, str]] = field(default_factory=list)
    screened: list[dict[str, str]] = field(default_factory=list)
    conflicts: list[dict[str, str]] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.conflicts

    def conflict(self, kind: str, ident: str, detail: str) -> None:
        self.conflicts.append({"type": kind, "id": ident, "detail": detail})


def _same_message(stored: Message, line: MessageLine) -> bool:
    return (
        stored.message_id == line.message_id
        and stored.agent_id == line.agent_id
        and stored.user_id == line.user_id
        and stored.role == line.role
        and stored.content == line.content
        and stored.reasoning == line.reasoning
        and stored.tool_call == line.tool_call
        and stored.created_at == line.created_at
    )


def _summary(line: SummaryLine) -> Summary:
    return Summary(
        version=line.version,
        timestamp=line.timestamp,
        last_message_offset=line.last_message_offset,
        last_message_id=line.last_message_id,
        content=line.content,
        token_count=line.token_count,
        message_count=line.message_count,
    )


class AccountImport:
    """One import into (`environment`, `account_id`) over the node's stores (module doc)."""

    def __init__(
        self,
        stores: AccountStores,
        environment: str,
        account_id: str,
        *,
        progress: ProgressCallback = no_progress,
    ) -> None:
        self._stores = stores
        self._environment = environment
        self._account_id = account_id
        self._progress = progress
        self.report = ImportReport(account_id)

    async def run(self, parsed: ParsedExport) -> ImportReport:
        started = time.monotonic()
        for agent in parsed.agents:
            await self._agent(agent)
        for number, records in enumerate(parsed.threads, start=1):
            await self._thread(records)
            self._progress(
                Progress("threads", number, len(parsed.threads), records.thread.thread_id, self._figures())
            )
        restorer = EntryRestorer(self._stores.entries)
        for number, line in enumerate(parsed.entries, start=1):
            await self._entry(restorer, line)
            if number % 100 == 0 or number == len(parsed.entries):
                self._progress(Progress("memory entries", number, len(parsed.entries), "", self._figures()))
        self.report.seconds = round(time.monotonic() - started, 3)
        return self.report

    def _figures(self) -> dict[str, float]:
        return {f"added_{k}": float(v) for k, v in self.report.added.items()}

    async def _agent(self, line: AgentLine) -> None:
        stored, inserted = await self._stores.restore.restore_agent(
            self._environment,
            self._account_id,
            line.agent_id,
            line.capabilities,
            line.created_at,
            line.updated_at,
        )
        if inserted:
            self.report.added["agent"] += 1
        elif stored.capabilities == frozenset(line.capabilities):
            self.report.unchanged["agent"] += 1
        else:
            self.report.conflict(
                "agent",
                line.agent_id,
                f"the target's agent has capabilities {sorted(stored.capabilities)}, the file "
                f"{sorted(line.capabilities)}: kept the target's",
            )

    async def _thread(self, records: ThreadRecords) -> None:
        line = records.thread
        wanted = Thread(
            environment=self._environment,
            account_id=self._account_id,
            thread_id=line.thread_id,
            agent_id=line.agent_id,
            user_id=line.user_id,
            metadata=line.metadata,
            created_at=line.created_at,
            updated_at=line.updated_at,
        )
        stored, inserted = await self._stores.restore.restore_thread(wanted)
        if (stored.agent_id, stored.user_id) != (line.agent_id, line.user_id):
            self.report.conflict(
                "thread",
                line.thread_id,
                f"the target's thread belongs to agent {stored.agent_id} and user {stored.user_id}, "
                f"the file's to agent {line.agent_id} and user {line.user_id}: its messages and "
                "summaries were skipped",
            )
            return
        if inserted:
            self.report.added["thread"] += 1
        elif stored.metadata != line.metadata:
            self.report.conflict(
                "thread", line.thread_id, "the target's thread has other metadata: kept the target's"
            )
        else:
            self.report.unchanged["thread"] += 1
        existing = await self._existing(stored, records.messages)
        if existing is None:
            return
        await self._summaries(stored, records.summaries)  # first: the thresholds then count from it
        await self._append(stored, records.messages[existing:])

    async def _existing(self, thread: Thread, lines: list[MessageLine]) -> int | None:
        """How many of the thread's messages the target holds already, at their offsets; None
        after a conflict (the thread's messages and summaries are then skipped)."""
        journal = self._stores.journal
        existing: list[Message] = []
        while True:
            page = await journal.after(thread.ref, existing[-1].offset if existing else -1, 1000)
            existing.extend(page)
            if len(page) < 1000:
                break
        for line, stored in zip(lines, existing, strict=False):
            if not _same_message(stored, line):
                self.report.conflict(
                    "message",
                    line.message_id,
                    f"offset {line.offset} of thread {thread.thread_id} holds message {stored.message_id} "
                    "with other content in the target: the thread's messages and summaries were skipped",
                )
                return None
        held = min(len(lines), len(existing))
        self.report.unchanged["message"] += held
        return held

    async def _append(self, thread: Thread, lines: list[MessageLine]) -> None:
        """Append the messages the target lacks; a refusal skips the thread's later messages."""
        journal = self._stores.journal
        for batch in _batches(lines):
            first = batch[0]
            try:
                written = await journal.append(
                    thread.ref, first.agent_id, first.user_id, [m.new_message() for m in batch]
                )
            except MemstreamError as exc:
                if isinstance(exc, OUTAGES):
                    raise  # not a conflict: the import stops; run it again (it adds what is missing)
                self.report.conflict(
                    "message",
                    first.message_id,
                    f"the journal refused messages from offset {first.offset} of thread "
                    f"{thread.thread_id} ({exc.code}: {exc.message}): the thread's later messages were "
                    "skipped",
                )
                return
            for line, stored in zip(batch, written, strict=True):
                if stored.offset != line.offset or not _same_message(stored, line):
                    self.report.conflict(
                        "message",
                        line.message_id,
                        f"message {line.message_id} of thread {thread.thread_id} is at offset "
                        f"{stored.offset} in the target, not {line.offset} (written meanwhile by someone "
                        "else, or its id was already used): the thread's later messages were skipped",
                    )
                    return
            self.report.added["message"] += len(batch)

    async def _summaries(self, thread: Thread, lines: list[SummaryLine]) -> None:
        if not lines:
            return
        ref, agent_id = thread.ref, thread.agent_id
        stored = {s.version: s for s in await self._stores.summary_versions.versions(ref, agent_id)}
        current = max(stored, default=None)
        for line in lines:
            wanted = _summary(line)
            there = stored.get(line.version)
            if there is not None:
                if there != wanted:
                    self.report.conflict(
                        "summary",
                        f"{thread.thread_id}/v{line.version}",
                        "the target holds this version with other content: the later versions were skipped",
                    )
                    return
                self.report.unchanged["summary"] += 1
                continue
            if current is not None and line.version < current:
                self.report.conflict(
                    "summary",
                    f"{thread.thread_id}/v{line.version}",
                    f"the target's summary is at version {current} already: versions below it cannot "
                    "be added; the later versions were skipped",
                )
                return
            try:
                written = await self._stores.summaries.write(
                    ref, agent_id, wanted, expected_version=current, floor=line.version - 1
                )
            except MemstreamError as exc:
                self.report.conflict(
                    "summary",
                    f"{thread.thread_id}/v{line.version}",
                    f"{exc.code}: {exc.message}; the later versions were skipped",
                )
                return
            current = written.version
            self.report.added["summary"] += 1
            if written.version != line.version:
                self.report.conflict(
                    "summary",
                    f"{thread.thread_id}/v{line.version}",
                    f"written as version {written.version}: the target had written versions up to "
                    f"{written.version - 1} of this thread before (their objects are gone)",
                )

    async def _entry(self, restorer: EntryRestorer, line: MemoryEntryLine) -> None:
        entry = MemoryEntry(
            entry_id=line.entry_id,
            environment=self._environment,
            account_id=self._account_id,
            agent_id=line.agent_id,
            user_id=line.user_id,
            author_user_id=line.author_user_id,
            key=line.key,
            content=line.content,
            category=line.category,
            visibility=line.visibility,
            importance=line.importance,
            content_hash=content_hash(line.content),
            expires_at=line.expires_at,
            recall_count=line.recall_count,
            last_recalled_at=line.last_recalled_at,
            created_at=line.created_at,
            updated_at=line.updated_at,
            source=line.source,
        )
        outcome = await restorer.restore(entry)
        if outcome.renumbered:
            self.report.renumbered.append({"entry_id": line.entry_id, "as": outcome.entry_id})
        if outcome.outcome == "restored":
            self.report.added["memory_entry"] += 1
        elif outcome.outcome == "unchanged":
            self.report.unchanged["memory_entry"] += 1
        elif outcome.outcome == "screened":
            self.report.screened.append(
                {
                    "entry_id": line.entry_id,
                    "agent_id": line.agent_id,
                    "key": line.key,
                    "rule": outcome.rule,
                    "detail": outcome.detail,
                }
            )
        else:
            self.report.conflict("memory_entry", line.entry_id, outcome.detail)


def _batches(lines: list[MessageLine]) -> Iterable[list[MessageLine]]:
    """Runs of at most `APPEND_BATCH` messages of one (agent, user)."""
    batch: list[MessageLine] = []
    for line in lines:
        run = (batch[0].agent_id, batch[0].user_id) if batch else None
        if batch and (len(batch) >= APPEND_BATCH or run != (line.agent_id, line.user_id)):
            yield batch
            batch = []
        batch.append(line)
    if batch:
        yield batch


async def import_account(
    stores: AccountStores,
    environment: str,
    account_id: str,
    lines: Iterable[str],
    *,
    progress: ProgressCallback = no_progress,
) -> ImportReport:
    """Check the whole file (`InvalidExport`: nothing written), then import it (module doc)."""
    parsed = read_export(lines)
    return await AccountImport(stores, environment, account_id, progress=progress).run(parsed)


def report_json(report: ImportReport) -> dict[str, Any]:
    return {
        "account_id": report.account_id,
        "ok": report.ok,
        "added": report.added,
        "unchanged": report.unchanged,
        "renumbered": report.renumbered,
        "screened": report.screened,
        "conflicts": report.conflicts,
        "seconds": report.seconds,
    }
