"""`DeletedMessages`: how a consumer of `journal.messages` honours thread deletions.

Such a consumer also consumes `journal.deletions` (a thread's seq-bounded tombstone,
`core.stores.deletions`). `split(batch)` separates the tombstones of a batch (decoded; a bad record
raises `InvalidMessage`) from its other records; `known(new)` returns every tombstone known, after
loading them from the deletion register (`source`) on first use - so a consumer that starts, or
replays from the beginning, never acts on a message deleted before - and adding `new`;
`Tombstones.deleted` then says which messages to drop. A failure to load is raised (the runtime
retries the batch: an outage of Postgres is waited out).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from core.journal.models import Message
from core.stores.deletions import Tombstone, Tombstones, TombstoneSource
from streams.codecs import journal_deletions, journal_messages
from streams.runtime.processor import Record, decoding

TOPIC = journal_deletions.TOPIC

log = logging.getLogger("memstream.deletions")


def is_deletion(record: Record) -> bool:
    """Whether `record` comes from `journal.deletions` (whatever the topic prefix)."""
    return record.topic.endswith(TOPIC)


def decode_tombstone(record: Record) -> Tombstone:
    """The tombstone of one `journal.deletions` record; InvalidMessage if it is not one."""
    with decoding(record):
        return journal_deletions.decode(record.key, record.value).tombstone


class DeletedMessages:
    """The deletions one consumer knows (module doc). Without `source`, only those it consumes."""

    def __init__(self, source: TombstoneSource | None, consumer: str) -> None:
        self._source = source
        self._consumer = consumer
        self._known: Tombstones | None = None if source is not None else Tombstones()

    def split(self, batch: Sequence[Record]) -> tuple[list[Tombstone], list[Record]]:
        """(the batch's tombstones, its other records), each in record order."""
        tombstones = [decode_tombstone(r) for r in batch if is_deletion(r)]
        return tombstones, [r for r in batch if not is_deletion(r)]

    async def known(self, new: Sequence[Tombstone] = ()) -> Tombstones:
        """Every tombstone known (loaded from the source first), `new` included."""
        if self._known is None:
            assert self._source is not None
            self._known = Tombstones(await self._source.tombstones())
            log.info("%s: %d deleted threads known", self._consumer, len(self._known))
        for tombstone in new:
            self._known.add(tombstone)
        return self._known

    async def preload(self) -> None:
        """Load the tombstones now if the source answers (a processor's start); if it does not,
        say so: the first batch loads them (or waits for the source)."""
        try:
            await self.known()
        except Exception as exc:  # any failure of the source: the first batch retries
            log.warning(
                "%s: the deletion register could not be read at start (%s): retrying", self._consumer, exc
            )

    async def live_messages(self, batch: Sequence[Record]) -> list[Message]:
        """The `journal.messages` of `batch` not deleted, in record order, after learning its
        tombstones; all-or-nothing: InvalidMessage for the first bad record, before any effect."""
        tombstones, records = self.split(batch)
        decoded = []
        for record in records:
            with decoding(record):
                decoded.append(journal_messages.decode(record.value))
        known = await self.known(tombstones)
        return [m for m in decoded if not known.deleted(m.environment, m.account_id, m.thread_id, m.seq)]
