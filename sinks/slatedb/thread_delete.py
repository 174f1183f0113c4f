"""Deleting one thread's rows from the journal (`SlateJournal.delete_thread`), run by the writer task.

The writer (`sinks.slatedb.group_commit.GroupCommit`) serializes a deletion with the appends: it
runs between two groups, so every append acknowledged before it is deleted and every one after it
is kept (with higher seqs). `plan_delete` scans the thread's rows (latest state: every earlier
group was durable or failed) and returns the keys to delete (each row, its seq pointer and its
message-id pointer) with what they held (`core.stores.deletions.JournalDeletion`); the writer
deletes them in ONE durable `WriteBatch` together with the seq floor (`keys.SEQ_FLOOR_KEY`: the
highest seq ever allocated), so that deleting the newest messages never lets a seq be allocated
again after a restart (`GroupCommit.recover` takes the larger of the floor and the seq index).

A message id of a deleted message is free again: appending it later makes a new message.
"""

from __future__ import annotations

from typing import Any

from core.journal.models import ThreadRef
from core.stores.deletions import JournalDeletion, seq_ranges
from sinks.slatedb import keys
from sinks.slatedb.binding import ALL, scan_options

SCAN_BATCH = 1000
LATEST_ASC = scan_options(False)


async def plan_delete(db: Any, url: str, thread: ThreadRef) -> tuple[list[bytes], JournalDeletion]:
    """The keys of `thread`'s rows and their index entries, and what they hold (module doc)."""
    iterator = await db.scan_prefix_with_options(keys.thread_prefix(thread), ALL, LATEST_ASC)
    doomed: list[bytes] = []
    seqs: list[int] = []
    while True:
        rows = await iterator.next_batch(SCAN_BATCH)
        if not rows:
            break
        for row in rows:
            message = keys.parse_row(url, row.key, row.value)
            seqs.append(message.seq)
            doomed.append(row.key)
            doomed.append(keys.seq_key(message.seq))
            doomed.append(keys.message_id_key(thread.environment, thread.account_id, message.message_id))
    return doomed, JournalDeletion(messages=len(seqs), up_to_seq=max(seqs, default=0), seqs=seq_ranges(seqs))


async def read_seq_floor(db: Any) -> int:
    """The seq floor a deletion left (0 when none)."""
    value = await db.get(keys.SEQ_FLOOR_KEY)
    return 0 if value is None else int(value)
