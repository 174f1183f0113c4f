"""The topics `streams.topic_sync` keeps complete, and how each one is refilled.

A guard keeps the identity (fingerprint) of the topic its progress was confirmed on, and refills
the topic from its source of truth when the check finds another one.

- `JournalTopicGuard`: one per journal shard (`core.sharding.shards`), over the shard's journal
  and relay. Identity kept in the shard's journal beside the relay's cursor (cursor
  `{relay cursor}.topic`, so it travels with the cursor between nodes sharing a journal). Refill:
  rewind the relay to the lowest watermark of the shard among the journal's consumer groups
  (`low_watermark`, `sinks.postgres.progress`), never above its cursor, and record that seq as the
  topic's floor of the shard (`{relay cursor}.floor`: the topic may lack seqs of the shard at or
  below it). Each shard is refilled from its own checkpoint. `ensure_full_history()`
  republishes from seq 1 when the floor is above 0 (what `memstream rebuild clickhouse` needs).
  While the topic stays the same, each check also catches up (`catch_up`): a group whose
  watermark fell below the floor (its progress was dropped because its store is new -
  `Processor.progress_scope` - or it was replayed) gets the journal again from its watermark.
- `EntriesTopicGuard`: identity kept in Postgres (`topic_identities`); refill: the entries outbox
  relay moves every record confirmed on the lost topic but not yet applied by the projection back
  into the outbox (`EntriesOutboxRelay.republish_unapplied`).
- `CompactionTopicGuard` (`compaction.requested`, `compaction.flushed`): identity kept in Postgres
  too; refill: `on_lost()` - the compaction recovery requests every open compaction again
  (`processors.compaction_recovery`), whoever brought the topic back (the node's own
  `apply_topics` reports what it created, but a topic may come back by another way).
"""

from __future__ import annotations

import abc
import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import Protocol

import asyncpg

from core.config import Settings
from core.stores.journal import Journal
from streams.relays.journal import JOURNAL_TOPIC, Relay
from streams.relays.memory_entries import ENTRIES_TOPIC, EntriesOutboxRelay
from streams.topics import topic_name

log = logging.getLogger("memstream.topic_sync")

COMPACTION_TOPICS = ("compaction.requested", "compaction.flushed")


class WatermarkSource(Protocol):
    """The lowest watermark of consumer groups (`sinks.postgres.progress.PostgresProgress`)."""

    async def low_watermark(self, group_ids: Sequence[str], topic: str, shard: int = 0) -> int: ...


class TopicGuard(abc.ABC):
    """One topic whose stored progress belongs to one identity of it (module doc)."""

    name: str
    """The topic as declared in topics.yaml (unprefixed)."""

    @abc.abstractmethod
    async def stored(self) -> int:
        """The fingerprint stored with the progress; 0 when none was stored yet."""

    @abc.abstractmethod
    async def store(self, fingerprint: int) -> None:
        """Record `fingerprint` as the identity the progress now belongs to."""

    @abc.abstractmethod
    async def refill(self) -> str | None:
        """Publish again what the topic may lack; returns what was done (for the log), or None
        when nothing had been published that it could lack."""

    async def catch_up(self) -> str | None:
        """The topic is the one the progress was confirmed on: publish again what a consumer group
        lacks because its progress fell below what the topic still holds (a group whose store
        was created anew, a replay); returns what was done, or None. Default: nothing."""
        return None


class JournalTopicGuard(TopicGuard):
    """`journal.messages` for the shard of `relay` (module doc). `groups`: the consumer groups of
    the topic."""

    name = JOURNAL_TOPIC

    def __init__(
        self, journal: Journal, relay: Relay, watermarks: WatermarkSource, groups: Sequence[str]
    ) -> None:
        self.journal = journal
        self.relay = relay
        self.watermarks = watermarks
        self.groups = list(groups)
        self.identity_cursor = f"{relay.cursor_name}.topic"
        self.floor_cursor = f"{relay.cursor_name}.floor"
        self.last_refill_from: int | None = None
        """The seq the last refill republished from (None: no refill in this process)."""

    async def stored(self) -> int:
        return await self.journal.get_cursor(self.identity_cursor)

    async def store(self, fingerprint: int) -> None:
        await self.journal.set_cursor(self.identity_cursor, fingerprint)

    async def refill(self) -> str | None:
        cursor = await self.relay.cursor()
        if cursor == 0:
            return None
        try:
            low = await self.watermarks.low_watermark(self.groups, self.relay.topic, self.relay.shard)
        except Exception as exc:
            log.warning(
                "cannot read the consumer groups' watermarks (%r): republishing %s from the start",
                exc,
                self.relay.journal_name,
            )
            low = 0
        target = min(low, cursor)
        await self._republish_after(target)
        return (
            f"republishing {self.relay.journal_name} from seq {target + 1} (the lowest watermark of "
            f"{', '.join(self.groups)}; the relay had published up to seq {cursor})"
        )

    async def catch_up(self) -> str | None:
        """After a refill the topic holds only the seqs above the floor cursor; a group whose
        watermark is now below the floor (its progress was dropped: its store was created anew, or
        replayed) would never get the seqs between: republish from its watermark."""
        floor = await self.journal.get_cursor(self.floor_cursor)
        if floor == 0:
            return None
        low = await self.watermarks.low_watermark(self.groups, self.relay.topic, self.relay.shard)
        if low >= floor:
            return None
        await self._republish_after(low)
        return (
            f"republishing {self.relay.journal_name} from seq {low + 1}: the lowest watermark of "
            f"{', '.join(self.groups)} fell below what the topic holds (seqs above {floor})"
        )

    async def _republish_after(self, seq: int) -> None:
        """Rewind the relay to `seq` and record it as the topic's floor."""
        self.relay.interrupt()  # a round stuck on a replaced topic must give up the relay's lock
        with contextlib.suppress(ValueError):  # something else rewound it further meanwhile
            await self.relay.rewind(seq)
        await self.journal.set_cursor(self.floor_cursor, seq)
        self.last_refill_from = seq + 1

    async def ensure_full_history(self) -> bool:
        """Republish from seq 1 when the topic may lack early seqs (its floor is above 0); True if so."""
        floor = await self.journal.get_cursor(self.floor_cursor)
        if floor == 0:
            return False
        with contextlib.suppress(ValueError):
            await self.relay.rewind(0)  # (nothing to interrupt: the topic is the right one)
        await self.journal.set_cursor(self.floor_cursor, 0)
        log.info(
            "republishing %s from seq 1: %s lacked seqs up to %d",
            self.relay.journal_name,
            self.relay.topic,
            floor,
        )
        return True


class PostgresTopicGuard(TopicGuard):
    """A guard keeping the identity in Postgres (`topic_identities`, by broker-side topic name)."""

    def __init__(self, pool: asyncpg.Pool, broker_name: str) -> None:
        self.pool = pool
        self.broker_name = broker_name

    async def stored(self) -> int:
        value = await self.pool.fetchval(
            "SELECT fingerprint FROM topic_identities WHERE topic = $1", self.broker_name
        )
        return int(value or 0)

    async def store(self, fingerprint: int) -> None:
        await self.pool.execute(
            """
            INSERT INTO topic_identities (topic, fingerprint) VALUES ($1, $2)
            ON CONFLICT (topic) DO UPDATE SET fingerprint = EXCLUDED.fingerprint, updated_at = now()
            """,
            self.broker_name,
            fingerprint,
        )


class EntriesTopicGuard(PostgresTopicGuard):
    """`memory.entries` (module doc)."""

    name = ENTRIES_TOPIC

    def __init__(self, pool: asyncpg.Pool, relay: EntriesOutboxRelay) -> None:
        super().__init__(pool, relay.topic)
        self.relay = relay

    async def refill(self) -> str | None:
        self.relay.interrupt()  # a round stuck on the replaced topic must give up the relays' lock
        count = await self.relay.republish_unapplied()
        if count == 0:
            return None
        return f"{count} agent-memory record(s) not yet applied by the projection go back into the outbox"


class CompactionTopicGuard(PostgresTopicGuard):
    """`compaction.requested` or `compaction.flushed` (module doc): `on_lost` is called when the
    topic is not the one the open compactions were requested on."""

    def __init__(
        self, settings: Settings, pool: asyncpg.Pool, name: str, on_lost: Callable[[], None]
    ) -> None:
        super().__init__(pool, topic_name(settings, name))
        self.name = name
        self.on_lost = on_lost

    async def refill(self) -> str | None:
        self.on_lost()
        return "every open compaction is requested again"


def compaction_guards(
    settings: Settings, pool: asyncpg.Pool, on_lost: Callable[[], None]
) -> list[CompactionTopicGuard]:
    """The guards of both compaction topics (`COMPACTION_TOPICS`), calling `on_lost`."""
    return [CompactionTopicGuard(settings, pool, name, on_lost) for name in COMPACTION_TOPICS]
