"""The thread-deletion part of `memstream verify`: what a completed deletion left behind, and the
deletions not completed.

For every tombstone of the environment (`core.stores.deletions`: thread, `up_to_seq`) whose
deletions are all complete, the journal must hold no message of the thread with
`seq <= up_to_seq` (messages of the thread id used again have higher seqs), the transcript
projection no such row, and the message vectors (`transcript-vectors`, when given) none either.
The processors apply a deletion asynchronously (its `journal.deletions` record), so rows still
found are re-counted until `settle_s` has passed before they are reported. Deletions not
completed (a crash midway: the node finishes them at start, or the same DELETE again) are
reported as such.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from core.journal.models import ThreadRef
from core.stores.deletions import DeletionRegister, Tombstone
from core.stores.journal import ThreadJournal
from core.stores.message_vectors import MessageVectorStore
from core.stores.transcripts import TranscriptStore

PAGE = 1000


@dataclass(frozen=True)
class DeletionLeftover:
    """Rows of a completed deletion still present (`journal` messages, `projection` rows,
    message `vectors`)."""

    account_id: str
    thread_id: str
    up_to_seq: int
    journal: int
    projection: int
    vectors: int = 0


async def journal_left(journal: ThreadJournal, tombstone: Tombstone) -> int:
    """The journal messages of the tombstone's thread it should have deleted (`seq <= up_to_seq`)."""
    thread = ThreadRef(
        environment=tombstone.environment, account_id=tombstone.account_id, thread_id=tombstone.thread_id
    )
    left, after = 0, -1
    while page := await journal.after(thread, after, PAGE):
        left += sum(1 for m in page if m.seq <= tombstone.up_to_seq)
        after = page[-1].offset
    return left


async def check_deletions(
    register: DeletionRegister,
    journal: ThreadJournal,
    store: TranscriptStore,
    environment: str,
    *,
    settle_s: float = 10.0,
    poll_s: float = 1.0,
    vectors: MessageVectorStore | None = None,
) -> tuple[list[str], list[DeletionLeftover]]:
    """(the incomplete deletions as `deletion_id account/thread`, the leftovers): module doc."""
    incomplete = [r for r in await register.incomplete() if r.environment == environment]
    open_scopes = {(r.account_id, r.thread_id) for r in incomplete}
    done = [
        t
        for t in await register.tombstones()
        if t.environment == environment and (t.account_id, t.thread_id) not in open_scopes
    ]
    deadline = time.monotonic() + settle_s
    while True:
        leftovers = []
        for tombstone in done:
            rows = await store.count_thread_rows(*tombstone.scope, tombstone.up_to_seq)
            messages = await journal_left(journal, tombstone)
            vectored = 0
            if vectors is not None:
                vectored = await vectors.count_thread_rows(*tombstone.scope, tombstone.up_to_seq)
            if rows or messages or vectored:
                leftovers.append(
                    DeletionLeftover(
                        tombstone.account_id,
                        tombstone.thread_id,
                        tombstone.up_to_seq,
                        messages,
                        rows,
                        vectored,
                    )
                )
        remaining = deadline - time.monotonic()
        if not leftovers or remaining <= 0:
            break
        await asyncio.sleep(min(poll_s, remaining))
    names = [f"{r.deletion_id} {r.account_id}/{r.thread_id}" for r in incomplete]
    return names, leftovers
