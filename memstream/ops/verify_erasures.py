"""The user-erasure part of `memstream verify`: what a completed erasure left behind, and the
erasures not completed.

For the latest completed erasure of each user of the environment (`core.stores.erasures`), what
existed when it was requested must be gone: the threads store holds no thread of the user created
before, agent memory no entry private to the user, no entry naming them as author and no
quarantine row of theirs created before (`core.memory.store.UserRows`), and for every thread
deletion of the user's erasures, the journal holds no message of the thread up to its tombstone
and the transcript projection (ClickHouse) no such row. What the user wrote after the erasure was
requested is new data and is not a leftover. The projection applies a deletion asynchronously, so
rows still found are re-counted until `settle_s` has passed before they are reported. Erasures not
completed (the node finishes them at start, or the same erasure again) are reported as such.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import datetime

from core.memory.erasure import MemoryErasure
from core.stores.deletions import DeletionRegister, Tombstone
from core.stores.erasures import ErasureRecord, ErasureRegister
from core.stores.journal import ThreadJournal
from core.stores.transcripts import TranscriptStore
from core.threads import ThreadStore
from memstream.ops.verify_deletions import journal_left

PAGE = 500


@dataclass(frozen=True)
class ErasureStores:
    """What the check reads: the erasure and deletion registers, the threads store (the authority)
    and agent memory (None: not checked)."""

    erasures: ErasureRegister
    deletions: DeletionRegister
    threads: ThreadStore
    memory: MemoryErasure | None = None


@dataclass(frozen=True)
class ErasureLeftover:
    """What the latest completed erasure of a user left: `threads` of theirs, memory rows
    (`private_entries`, `authored_entries`, `quarantined`), and the `journal` messages and
    `projection` rows of the threads its deletions deleted."""

    account_id: str
    user_id: str
    erasure_id: int
    threads: int
    private_entries: int
    authored_entries: int
    quarantined: int
    journal: int
    projection: int


async def _threads_before(threads: ThreadStore, record: ErasureRecord, before: datetime) -> int:
    count, after = 0, None
    while page := await threads.list_threads(
        record.environment, record.account_id, user_id=record.user_id, after=after, limit=PAGE
    ):
        count += sum(1 for t in page if t.created_at < before)
        after = page[-1].thread_id
    return count


async def _tombstones(stores: ErasureStores, erasures: list[ErasureRecord]) -> list[Tombstone]:
    found = []
    for erasure in erasures:
        for deletion_id in erasure.deletions:
            deletion = await stores.deletions.get(deletion_id)
            if deletion is not None and deletion.tombstone is not None:
                found.append(deletion.tombstone)
    return found


async def _leftover(
    stores: ErasureStores,
    journal: ThreadJournal,
    transcripts: TranscriptStore,
    latest: ErasureRecord,
    tombstones: list[Tombstone],
) -> ErasureLeftover | None:
    threads = await _threads_before(stores.threads, latest, latest.requested_at)
    rows = (0, 0, 0)
    if stores.memory is not None:
        left = await stores.memory.user_rows(
            latest.environment, latest.account_id, latest.user_id, created_before=latest.requested_at
        )
        rows = (left.private, left.authored, left.quarantined)
    messages = projected = 0
    for tombstone in tombstones:
        messages += await journal_left(journal, tombstone)
        projected += await transcripts.count_thread_rows(*tombstone.scope, tombstone.up_to_seq)
    if not (threads or any(rows) or messages or projected):
        return None
    return ErasureLeftover(
        latest.account_id, latest.user_id, latest.erasure_id, threads, *rows, messages, projected
    )


async def check_erasures(
    stores: ErasureStores,
    journal: ThreadJournal,
    transcripts: TranscriptStore,
    environment: str,
    *,
    settle_s: float = 10.0,
    poll_s: float = 1.0,
) -> tuple[list[str], list[ErasureLeftover]]:
    """(the incomplete erasures as `erasure_id account/user`, the leftovers): module doc."""
    incomplete = [r for r in await stores.erasures.incomplete() if r.environment == environment]
    by_user: dict[tuple[str, str], list[ErasureRecord]] = {}
    for record in await stores.erasures.completed(environment):
        by_user.setdefault((record.account_id, record.user_id), []).append(record)
    checks = [(records[-1], await _tombstones(stores, records)) for records in by_user.values()]
    deadline = time.monotonic() + settle_s
    while True:
        leftovers = [
            left
            for latest, tombstones in checks
            if (left := await _leftover(stores, journal, transcripts, latest, tombstones)) is not None
        ]
        remaining = deadline - time.monotonic()
        if not leftovers or remaining <= 0:
            break
        await asyncio.sleep(min(poll_s, remaining))
    names = [f"{r.erasure_id} {r.account_id}/{r.user_id}" for r in incomplete]
    return names, leftovers
