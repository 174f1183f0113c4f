"""Thread deletions: the seq-bounded tombstone and the durable register behind `DELETE /v1/threads/{id}`.

A deletion removes every message a thread had when its journal rows were deleted. Journal seqs
only increase (`Journal.delete_thread` keeps the highest seq ever allocated, so a deletion never
makes a seq reusable), so it is told by a `Tombstone`: (environment, account, thread,
`up_to_seq`), the highest seq the writer deleted. With journal shards (`core.sharding.shards`)
seqs count within a shard, and a thread lives in one shard for good (its id used again after a
deletion too), so a tombstone compares seqs of one shard only and stays exact. A message is
deleted iff a tombstone of its thread has `up_to_seq >= message.seq`; a thread id used again after
the deletion gets higher seqs and is never affected.

The register (`DeletionRegister`, table `thread_deletions`) holds one `DeletionRecord` per deletion,
written before anything is removed (the intent), then the report of each step as it completes, and
`completed_at` at the end: a deletion interrupted midway is finished from it
(`core.thread_deletion`). Its tombstones (every deletion whose journal step is done) are what a
projection must know before it projects anything (`processors.clickhouse_projection`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

SeqRanges = tuple[tuple[int, int], ...]
"""Inclusive ranges (lo, hi) of journal seqs, ascending and disjoint."""

ThreadScope = tuple[str, str, str]
"""(environment, account_id, thread_id)."""


def seq_ranges(seqs: Iterable[int]) -> SeqRanges:
    """`seqs` as ascending, disjoint, inclusive ranges (duplicates allowed)."""
    ranges: list[tuple[int, int]] = []
    for seq in sorted(set(seqs)):
        if ranges and ranges[-1][1] == seq - 1:
            ranges[-1] = (ranges[-1][0], seq)
        else:
            ranges.append((seq, seq))
    return tuple(ranges)


def merge_ranges(*parts: SeqRanges) -> SeqRanges:
    """The union of inclusive seq ranges, ascending and disjoint (adjacent ranges joined)."""
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted(r for part in parts for r in part):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return tuple(merged)


def merged_outcome(record: DeletionRecord, deleted: JournalDeletion) -> JournalDeletion:
    """What the journal step of `record` deleted in all, with the outcome of one more run of it."""
    before = record.report.get("journal", {}).get("messages", 0) if record.up_to_seq is not None else 0
    return JournalDeletion(
        messages=int(before) + deleted.messages,
        up_to_seq=max(record.up_to_seq or 0, deleted.up_to_seq),
        seqs=merge_ranges(record.seqs or (), deleted.seqs),
    )


@dataclass(frozen=True)
class Tombstone:
    """Every message of the thread with `seq <= up_to_seq` is deleted (module doc)."""

    environment: str
    account_id: str
    thread_id: str
    up_to_seq: int

    @property
    def scope(self) -> tuple[str, str, str]:
        return (self.environment, self.account_id, self.thread_id)


class Tombstones:
    """The tombstones a consumer knows, by thread (the highest `up_to_seq` of each): answers
    "is this message deleted?" without I/O."""

    def __init__(self, known: Iterable[Tombstone] = ()) -> None:
        self._up_to: dict[tuple[str, str, str], int] = {}
        for tombstone in known:
            self.add(tombstone)

    def __len__(self) -> int:
        return len(self._up_to)

    def add(self, tombstone: Tombstone) -> bool:
        """Know `tombstone`; True when it deletes more than was known."""
        if tombstone.up_to_seq <= self._up_to.get(tombstone.scope, 0):
            return False
        self._up_to[tombstone.scope] = tombstone.up_to_seq
        return True

    def deleted(self, environment: str, account_id: str, thread_id: str, seq: int) -> bool:
        """Whether the message `seq` of the thread is deleted."""
        return seq <= self._up_to.get((environment, account_id, thread_id), 0)


@dataclass(frozen=True)
class JournalDeletion:
    """What `Journal.delete_thread` removed: `messages` rows (with their seq and message-id index
    entries), the highest seq among them (`up_to_seq`, 0 when none) and every seq (`seqs`)."""

    messages: int
    up_to_seq: int
    seqs: SeqRanges = ()


@dataclass(frozen=True)
class DeletionRecord:
    """One deletion in the register. `report` holds each completed step's report by step name;
    `up_to_seq` and `seqs` are None until the journal step is done."""

    deletion_id: int
    environment: str
    account_id: str
    thread_id: str
    agent_id: str | None
    user_id: str | None
    requested_at: datetime
    up_to_seq: int | None = None
    seqs: SeqRanges | None = None
    report: Mapping[str, Any] = field(default_factory=dict)
    completed_at: datetime | None = None

    @property
    def tombstone(self) -> Tombstone | None:
        if self.up_to_seq is None:
            return None
        return Tombstone(self.environment, self.account_id, self.thread_id, self.up_to_seq)


class DeletionRegister(Protocol):
    """The durable register of thread deletions (module doc). Every call returns once durable;
    `core.errors.StoreUnavailable` when the store cannot be reached."""

    async def open(
        self, environment: str, account_id: str, thread_id: str, agent_id: str | None, user_id: str | None
    ) -> DeletionRecord:
        """The thread's incomplete deletion if there is one, else a new one (the intent)."""
        ...

    async def latest(self, environment: str, account_id: str, thread_id: str) -> DeletionRecord | None:
        """The thread's most recent deletion, complete or not."""
        ...

    async def get(self, deletion_id: int) -> DeletionRecord | None: ...

    async def record_journal(self, deletion_id: int, deleted: JournalDeletion) -> DeletionRecord:
        """Add one run's outcome of the journal step (`merged_outcome`: `up_to_seq` the highest,
        `seqs` the union, report `journal` the messages in all), atomically: a re-run that found
        nothing changes nothing, and two runs racing (two DELETEs at once) lose neither's
        deletions."""
        ...

    async def record_step(self, deletion_id: int, step: str, report: Mapping[str, Any]) -> DeletionRecord:
        """Store the report of `step` (done)."""
        ...

    async def complete(self, deletion_id: int) -> DeletionRecord:
        """Stamp `completed_at` (kept when already set)."""
        ...

    async def incomplete(self) -> list[DeletionRecord]:
        """Every deletion not completed, oldest first."""
        ...

    async def tombstones(self) -> list[Tombstone]:
        """The tombstone of every deletion whose journal step is done, complete or not."""
        ...

    async def deleted_seqs(self) -> dict[ThreadScope, SeqRanges]:
        """The `seqs` of every deletion whose journal step is done, by thread (environment,
        account, thread; a thread's deletions merged): the seqs count in the thread's journal shard."""
        ...


class TombstoneSource(Protocol):
    """What a projection loads at start (a `DeletionRegister` is one): every tombstone so far."""

    async def tombstones(self) -> Sequence[Tombstone]: ...

    async def deleted_seqs(self) -> dict[ThreadScope, SeqRanges]: ...
