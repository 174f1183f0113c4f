"""`memstream export`: one account as JSON Lines (`memstream.ops.export_format`), run inside the
node (it owns the journal writer; the admin route streams the lines).

`AccountStores` is what an export reads and an import writes; `export_account` yields the lines
(without their newlines) in the format's fixed order: the header; the account's agents with a
capability record, by agent_id; each thread by thread_id, followed by its messages by offset and
every kept version of its summary (`summary.v{N}.json`, ascending: the point-in-time context of an
imported thread then shows the same summaries as the source's); the memory entries by entry_id
(shared, private and expired ones: everything the account stores, quarantined entries excepted);
the `end` line with the counts.

Only the named account of the node's environment is read: every store call names both, so
another account's data cannot reach the file.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from core.journal.models import Message, ThreadRef
from core.memory.models import MemoryEntry
from core.memory.quarantine import QuarantineStore
from core.stores.agents import AgentRecord, AgentStore
from core.stores.journal import ThreadJournal
from core.summaries.models import Summary, SummaryStore
from core.threads import Thread, ThreadStore
from memstream.ops.export_format import dump, header, time_text
from memstream.ops.progress import Progress, ProgressCallback, no_progress

PAGE = 500
"""Threads, messages and entries read per store call."""


class SummaryVersions(Protocol):
    async def versions(self, thread: ThreadRef, agent_id: str) -> list[Summary]:
        """Every kept version, oldest first (`ObjectStoreSummaryReader.versions`)."""
        ...


class AccountRestore(Protocol):
    """Rows inserted with their own timestamps (`sinks.postgres.account_restore`)."""

    async def restore_thread(self, thread: Thread) -> tuple[Thread, bool]:
        """Insert unless the key exists; (the stored row, inserted)."""
        ...

    async def restore_agent(
        self,
        environment: str,
        account_id: str,
        agent_id: str,
        capabilities: Sequence[str],
        created_at: datetime,
        updated_at: datetime,
    ) -> tuple[AgentRecord, bool]:
        """Insert unless the agent has a record; (the stored record, inserted)."""
        ...


@dataclass(frozen=True)
class AccountStores:
    """The node's stores as an export reads them and an import writes them."""

    threads: ThreadStore
    journal: ThreadJournal
    summary_versions: SummaryVersions
    summaries: SummaryStore
    """Writes imported versions (the summarizer's store: version floor and cache included)."""
    agents: AgentStore
    entries: QuarantineStore
    restore: AccountRestore


def agent_record(record: AgentRecord) -> dict[str, Any]:
    return {
        "type": "agent",
        "agent_id": record.agent_id,
        "capabilities": sorted(record.capabilities),
        "created_at": time_text(record.created_at),
        "updated_at": time_text(record.updated_at),
    }


def thread_record(thread: Thread) -> dict[str, Any]:
    return {
        "type": "thread",
        "thread_id": thread.thread_id,
        "agent_id": thread.agent_id,
        "user_id": thread.user_id,
        "metadata": thread.metadata,
        "created_at": time_text(thread.created_at),
        "updated_at": time_text(thread.updated_at),
    }


def message_record(message: Message) -> dict[str, Any]:
    tool_call = message.tool_call
    return {
        "type": "message",
        "thread_id": message.thread_id,
        "offset": message.offset,
        "message_id": message.message_id,
        "agent_id": message.agent_id,
        "user_id": message.user_id,
        "role": message.role,
        "content": message.content,
        "reasoning": message.reasoning,
        "tool_call": None if tool_call is None else tool_call.model_dump(mode="json"),
        "created_at": time_text(message.created_at),
    }


def summary_record(thread_id: str, summary: Summary) -> dict[str, Any]:
    return {
        "type": "summary",
        "thread_id": thread_id,
        "version": summary.version,
        "timestamp": time_text(summary.timestamp),
        "last_message_offset": summary.last_message_offset,
        "last_message_id": summary.last_message_id,
        "content": summary.content,
        "token_count": summary.token_count,
        "message_count": summary.message_count,
    }


def entry_record(entry: MemoryEntry) -> dict[str, Any]:
    return {
        "type": "memory_entry",
        "entry_id": entry.entry_id,
        "agent_id": entry.agent_id,
        "user_id": entry.user_id,
        "author_user_id": entry.author_user_id,
        "key": entry.key,
        "content": entry.content,
        "category": entry.category,
        "visibility": entry.visibility,
        "importance": entry.importance,
        "expires_at": None if entry.expires_at is None else time_text(entry.expires_at),
        "recall_count": entry.recall_count,
        "last_recalled_at": None if entry.last_recalled_at is None else time_text(entry.last_recalled_at),
        "created_at": time_text(entry.created_at),
        "updated_at": time_text(entry.updated_at),
        "source": None if entry.source is None else entry.source.model_dump(mode="json"),
    }


async def _threads(stores: AccountStores, environment: str, account_id: str) -> AsyncIterator[Thread]:
    after: str | None = None
    while True:
        page = await stores.threads.list_threads(environment, account_id, after=after, limit=PAGE)
        for thread in page:
            yield thread
        if len(page) < PAGE:
            return
        after = page[-1].thread_id


async def _messages(journal: ThreadJournal, thread: ThreadRef) -> AsyncIterator[Message]:
    offset = -1
    while True:
        page = await journal.after(thread, offset, PAGE)
        for message in page:
            yield message
        if len(page) < PAGE:
            return
        offset = page[-1].offset


async def export_account(
    stores: AccountStores, environment: str, account_id: str, *, progress: ProgressCallback = no_progress
) -> AsyncIterator[str]:
    """The account's export, line by line (module doc)."""
    counts = dict.fromkeys(("agent", "thread", "message", "summary", "memory_entry"), 0)
    yield dump(header())
    for record in await stores.agents.list(environment, account_id):
        counts["agent"] += 1
        yield dump(agent_record(record))
    async for thread in _threads(stores, environment, account_id):
        counts["thread"] += 1
        yield dump(thread_record(thread))
        async for message in _messages(stores.journal, thread.ref):
            counts["message"] += 1
            yield dump(message_record(message))
        for summary in await stores.summary_versions.versions(thread.ref, thread.agent_id):
            counts["summary"] += 1
            yield dump(summary_record(thread.thread_id, summary))
        progress(Progress("threads", counts["thread"], None, f"{counts['message']} messages"))
    after: uuid.UUID | None = None
    while True:
        page = await stores.entries.scan(environment, account_id, after=after, limit=PAGE)
        for stored in page:
            counts["memory_entry"] += 1
            yield dump(entry_record(stored.entry))
        if len(page) < PAGE:
            break
        after = uuid.UUID(page[-1].entry.entry_id)
    progress(Progress("memory entries", counts["memory_entry"], counts["memory_entry"]))
    yield dump({"type": "end", "counts": counts})
