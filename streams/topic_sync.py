"""Keeps the node's topics complete: detects a topic that lost what was published to it, and refills it.

A relay's durable progress ("published up to X") is true only for the topic it was confirmed on.
The embedded broker keeps topics in memory, so after it restarts `journal.messages` and
`memory.entries` are new and empty; and when two nodes share one journal, the other node's relay
moves the shared cursor while publishing to ITS broker. Both show as a topic identity (its Kafka
topic id, `streams.identity`) that differs from the one stored with the progress.

`TopicSync(settings, guards)` checks each guarded topic: it reads the topic's identity (creating
missing topics from topics.yaml first) and compares its `fingerprint` with the one the guard
stored. The same identity: nothing to do. A different one: the guard refills the topic from its
source of truth, then stores the new identity (in that order, so a crash in between refills again
on the next check). When nothing was stored yet (a deployment that predates this check) on a topic
that existed before this check, the topic is trusted as it was and its identity recorded.

Guards:
- `JournalTopicGuard`: identity kept in the journal beside the relay's cursor (cursor
  `{relay cursor}.topic`, so it travels with the cursor between nodes sharing a journal). Refill:
  rewind the relay to the lowest watermark of the journal's consumer groups (`low_watermark`,
  `sinks.postgres.progress`), never above its cursor, and record that seq as the topic's floor
  (`{relay cursor}.floor`: the topic may lack seqs at or below it). `ensure_full_history()`
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

A replaced topic (a refill, not the first identity recorded) also gets its consumers restarted
before the refill, when `restart_consumers` is set (the node sets it once its processors exist:
`memstream.ops.topic_restart`); a check restarts those of every replaced topic at once. Nothing
this node's consumers knew of the old topic - positions, offsets acked there and not committed
yet - may reach the new one, or the group would skip the lower offsets of the refilled topic for
good. A restart that fails fails the check, so the identity is not stored and the next check
refills and restarts again.

`check()` runs at node start, from the relay's topic-missing hook, and every `interval_s` in `run`
(the periodic consistency check); checks are serialised. Logs: `memstream.topic_sync`.

The blocking broker calls of a check (and the node's own `apply_topics` after a lost topic) run in
threads of their own (`in_admin_thread`), never in asyncio's default executor: while the broker
lacks a topic, every producer waiting for it holds a default-executor thread (a handful of them
fill it on a small machine), and a check queued behind them would wait for what only it can
bring back - the topics.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import asyncpg

from core.config import Settings
from core.errors import JournalFenced
from core.stores.journal import Journal
from streams.admin import TopicAdminError, apply_topics
from streams.identity import fingerprint, topic_identity
from streams.relays.journal import JOURNAL_TOPIC, Relay
from streams.relays.memory_entries import ENTRIES_TOPIC, EntriesOutboxRelay
from streams.topics import TopicRegistry, default_registry, topic_name

log = logging.getLogger("memstream.topic_sync")

CHECK_INTERVAL_S = 10.0
COMPACTION_TOPICS = ("compaction.requested", "compaction.flushed")
IDENTITY_TIMEOUT_S = 3.0
"""How long a check waits for the broker to describe a topic (a worker thread outlives a stop by
at most this much)."""
FAILURE_LOG_INTERVAL_S = 60.0

T = TypeVar("T")

_ADMIN_THREADS = ThreadPoolExecutor(max_workers=4, thread_name_prefix="memstream-topic-admin")


async def in_admin_thread(call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`call(*args, **kwargs)` (a blocking topic-administration call: `streams.admin`,
    `streams.identity`) in the topic-administration threads (module doc)."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_ADMIN_THREADS, functools.partial(call, *args, **kwargs))


class WatermarkSource(Protocol):
    """The lowest watermark of consumer groups (`sinks.postgres.progress.PostgresProgress`)."""

    async def low_watermark(self, group_ids: Sequence[str], topic: str) -> int: ...


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
    """`journal.messages` (module doc). `groups`: the consumer groups of the topic."""

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
            low = await self.watermarks.low_watermark(self.groups, self.relay.topic)
        except Exception as exc:
            log.warning("cannot read the consumer groups' watermarks (%r): republishing from the start", exc)
            low = 0
        target = min(low, cursor)
        await self._republish_after(target)
        return (
            f"republishing the journal from seq {target + 1} (the lowest watermark of "
            f"{', '.join(self.groups)}; the relay had published up to seq {cursor})"
        )

    async def catch_up(self) -> str | None:
        """After a refill the topic holds only the seqs above the floor cursor; a group whose
        watermark is now below the floor (its progress was dropped: its store was created anew, or
        replayed) would never get the seqs between: republish from its watermark."""
        floor = await self.journal.get_cursor(self.floor_cursor)
        if floor == 0:
            return None
        low = await self.watermarks.low_watermark(self.groups, self.relay.topic)
        if low >= floor:
            return None
        await self._republish_after(low)
        return (
            f"republishing the journal from seq {low + 1}: the lowest watermark of "
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
        log.info("republishing the journal from seq 1: %s lacked seqs up to %d", self.relay.topic, floor)
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


class TopicSync:
    """Checks guarded topics against their stored identity and refills them (module doc)."""

    def __init__(
        self,
        settings: Settings,
        guards: Sequence[TopicGuard],
        *,
        registry: TopicRegistry | None = None,
        interval_s: float = CHECK_INTERVAL_S,
        on_topics_applied: Callable[[Sequence[str]], None] | None = None,
    ) -> None:
        """`on_topics_applied(created)` is called whenever a check applied topics.yaml (a guarded
        topic was missing), with the topics that run created (e.g. for the compaction recovery)."""
        self.settings = settings
        self.on_topics_applied = on_topics_applied
        self.guards = list(guards)
        self.registry = registry or default_registry()
        self.interval_s = interval_s
        self.refills = 0
        self.restart_consumers: Callable[[str], Awaitable[None]] | None = None
        """Restarts the consumers of a replaced topic (declared name) from its beginning (module doc)."""
        self._lock = asyncio.Lock()
        self._failure_logged_at = -FAILURE_LOG_INTERVAL_S

    async def check(self, *, created: Sequence[str] = ()) -> list[str]:
        """Check every guarded topic; `created`: topics just created by the caller (unprefixed).
        Returns the names of the topics that were refilled."""
        refilled: list[str] = []
        async with self._lock:
            found = [await self._inspect(guard, guard.name in created) for guard in self.guards]
            await self._restart_consumers([state.guard.name for state in found if state.replaced])
            for state in found:
                if await self._settle(state):
                    refilled.append(state.guard.name)
        return refilled

    async def run(self, stop: asyncio.Event) -> None:
        """Check every `interval_s` until `stop` (a check in progress is abandoned at once: a stop
        never waits for an unreachable broker); raises only `JournalFenced`."""
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.interval_s)
            if stop.is_set():
                return
            check = asyncio.ensure_future(self.check())
            stopped = asyncio.ensure_future(stop.wait())
            await asyncio.wait({check, stopped}, return_when=asyncio.FIRST_COMPLETED)
            stopped.cancel()
            if not check.done():
                check.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await check
                return
            try:
                check.result()
            except JournalFenced:
                raise
            except Exception as exc:
                now = time.monotonic()
                if now - self._failure_logged_at >= FAILURE_LOG_INTERVAL_S:
                    self._failure_logged_at = now
                    log.warning(
                        "topic consistency check failed (%r); retrying in %.0fs", exc, self.interval_s
                    )

    async def _inspect(self, guard: TopicGuard, created: bool) -> _Found:
        """The topic's identity now (applying topics.yaml when it is missing) next to the stored one."""
        broker_name = topic_name(self.settings, guard.name, registry=self.registry)
        bootstrap = self.settings.broker_bootstrap
        identity = await in_admin_thread(topic_identity, bootstrap, broker_name, timeout=IDENTITY_TIMEOUT_S)
        if identity is None:
            report = await in_admin_thread(apply_topics, self.settings, self.registry)
            if self.on_topics_applied is not None:
                self.on_topics_applied(report.created)
            created = created or report.was_created(guard.name)
            identity = await in_admin_thread(
                topic_identity, bootstrap, broker_name, timeout=IDENTITY_TIMEOUT_S
            )
            if identity is None:
                raise TopicAdminError(
                    f"{broker_name} is still missing on {bootstrap} after applying topics.yaml"
                )
        return _Found(guard, broker_name, fingerprint(identity), await guard.stored(), created)

    async def _restart_consumers(self, topics: Sequence[str]) -> None:
        """Restart the consumers of every replaced topic at once (module doc); the first failure
        raises once all of them ended."""
        if not topics or self.restart_consumers is None:
            return
        results = await asyncio.gather(
            *(self.restart_consumers(topic) for topic in topics), return_exceptions=True
        )
        for result in results:
            if isinstance(result, BaseException):
                raise result

    async def _settle(self, found: _Found) -> bool:
        """Act on what `_inspect` found: catch up, record the first identity, or refill; True when
        something was published again."""
        guard, broker_name, current, stored = found.guard, found.broker_name, found.current, found.stored
        bootstrap = self.settings.broker_bootstrap
        if stored == current:
            caught_up = await guard.catch_up()
            if caught_up is not None:
                self.refills += 1
                log.warning("%s on %s: %s", broker_name, bootstrap, caught_up)
            return caught_up is not None
        if not found.replaced:
            log.info("%s: recording its identity on %s (nothing was recorded before)", broker_name, bootstrap)
            await guard.store(current)
            return False
        why = "was created anew" if stored == 0 else "is not the topic the stored progress was confirmed on"
        done = await guard.refill()
        await guard.store(current)
        if done is None:
            return False
        self.refills += 1
        log.warning(
            "%s on %s %s (a broker that lost it, or another node's broker): %s",
            broker_name,
            bootstrap,
            why,
            done,
        )
        return True


@dataclass(frozen=True)
class _Found:
    """One guarded topic as a check found it."""

    guard: TopicGuard
    broker_name: str
    current: int
    """The topic's fingerprint now."""
    stored: int
    """The fingerprint stored with the progress (0: none)."""
    created: bool
    """The topic was just created (by the caller or by this check)."""

    @property
    def replaced(self) -> bool:
        """The topic is not the one the progress was confirmed on: refill it (a topic nothing was
        stored for yet, and that existed before, is trusted instead)."""
        return self.stored != self.current and (self.stored != 0 or self.created)
