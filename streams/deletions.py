"""`DeletionEvents`: publishes a thread deletion's tombstone on `journal.deletions` (topics.yaml).

`publish` returns only once the broker confirmed the record (`streams.producer.BatchPublisher`), so
a deletion records its `event` step only when the processors can see it; a failure raises
`DeletionNotPublished` (a `StoreUnavailable`: the deletion stays incomplete and is finished later,
publishing again, which consumers tolerate).
"""

from __future__ import annotations

import logging
from datetime import datetime

from core.config import Settings
from core.errors import StoreUnavailable
from core.stores.deletions import Tombstone
from streams.codecs import journal_deletions
from streams.producer import BatchPublisher, DeliveryAborted, OutgoingRecord, RecordsNotConfirmed
from streams.topics import topic_name

log = logging.getLogger("memstream.deletions")


class DeletionNotPublished(StoreUnavailable):
    """The broker did not confirm a deletion's record."""

    code = "deletion_not_published"


class DeletionEvents:
    """The producer of `journal.deletions` (module doc). Construction does no I/O."""

    def __init__(self, settings: Settings, publisher: BatchPublisher | None = None) -> None:
        self.topic = topic_name(settings, journal_deletions.TOPIC)
        self._publisher = publisher or BatchPublisher(
            settings, self.topic, client_id="memstream-deletions", logger=log
        )

    async def publish(self, deletion_id: int, tombstone: Tombstone, requested_at: datetime) -> None:
        event = journal_deletions.encode(deletion_id, tombstone, requested_at)
        record = OutgoingRecord(key=event.key, value=event.value, headers=event.headers)
        try:
            await self._publisher.publish([record])
        except (RecordsNotConfirmed, DeliveryAborted) as exc:
            raise DeletionNotPublished(
                f"the deletion of {tombstone.thread_id} was not published: {exc}"
            ) from exc

    def close(self) -> None:
        self._publisher.close()
