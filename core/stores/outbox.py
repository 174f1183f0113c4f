"""The agent-memory outbox: the rows every committed change of an entry leaves behind, which the
entries relay (`streams.relays.memory_entries`) publishes to `memory.entries`, and the note of what
the qdrant-projection applied. The adapter is `sinks.postgres.outbox`.

Row life: outbox (unpublished) -> published (confirmed by the broker, not yet applied by the
projection) -> forgotten once the projection noted it applied. `republish_unapplied` moves the
published rows back into the outbox (after the broker lost the topic).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class OutboxRow:
    """One outbox row: `seq` (the outbox order), the record key, and the EntryEvent as JSON-ready
    value (None = a tombstone)."""

    seq: int
    record_key: str
    value: Any


class OutboxBatch(Protocol):
    """Rows claimed by one relay round, in seq order (possibly none)."""

    rows: Sequence[OutboxRow]

    async def published(self) -> None:
        """The broker confirmed every row of the batch: move them out of the outbox (into the
        published rows) and forget the published rows the projection applied. Takes effect when
        the `claim` block ends without an error."""
        ...


class OutboxListener(Protocol):
    """A subscription to the outbox's commit notifications."""

    def usable(self) -> bool:
        """False once the subscription is lost (e.g. its connection closed): listen again."""
        ...

    async def close(self) -> None:
        """End the subscription; never raises."""
        ...


class EntriesOutbox(Protocol):
    """The relay's view of the outbox (`sinks.postgres.outbox.PostgresEntriesOutbox`)."""

    def claim(self, limit: int) -> AbstractAsyncContextManager[OutboxBatch | None]:
        """The first `limit` outbox rows, claimed for the block: None when another relay holds the
        claim. Everything `published()` did is undone when the block raises."""
        ...

    async def republish_unapplied(self) -> int:
        """Move every published row the projection has not applied back into the outbox (same seqs,
        so before newer rows); returns how many. Waits for a claim in progress."""
        ...

    async def pending(self) -> int:
        """Outbox rows not yet confirmed on the topic."""
        ...

    async def listen(self, on_notify: Callable[[], None]) -> OutboxListener:
        """Call `on_notify()` whenever a transaction that wrote outbox rows commits. Raises when the
        store cannot be reached."""
        ...


class AppliedOutbox(Protocol):
    """Where the qdrant-projection notes the outbox seqs it applied
    (`sinks.postgres.outbox.PostgresAppliedOutbox`)."""

    async def start(self) -> None:
        """Open what `record` needs (may raise while the store is unreachable; `record` opens it
        then)."""
        ...

    async def stop(self) -> None: ...

    async def record(self, seqs: Sequence[int]) -> None:
        """Note that the records of outbox `seqs` are durably applied. Idempotent."""
        ...
