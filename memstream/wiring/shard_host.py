"""`ShardHost`: the journal shards a node opens and closes while it serves, as its
`memstream.sharding.membership_loop.MembershipLoop` decides (`MEMSTREAM_MEMBERSHIP`).

`open_shard(k, epoch)` opens shard k's journal writer (`SlateJournal.open`: the open fences any
writer left on it, e.g. a node that lost the lease), builds its relay and topic guard
(`make_local_shard`, as a node opening every shard does), checks the guard's topic (before the
relay runs), makes the shard local (the API's `ShardedJournal.attach`: its threads are served
here from now on) and starts its relay and its fence watch. `close_shard(k)` undoes it in the
other order: the shard stops being local (its requests answer 503 `ShardNotLocal` or are forwarded),
its relay publishes what is durable and stops, and its journal closes (appends already routed to it
finish first). Each is bounded by `timeout_s`: a close that does not finish raises, and the loop
leaves the lease to run out (the next owner's open fences the writer). Both are idempotent.

A shard whose writer is fenced (another node opened it: this node's lease ran out) is closed here at
once, with an error in the log; the loop notices the lost lease on its next renewal.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass

from core.config import Settings
from core.errors import JournalFenced
from core.sharding.journal import ShardedJournal
from memstream.fencing import watch_fence
from sinks.slatedb.journal import SlateJournal
from streams.journal_shards import LocalShard
from streams.topic_sync import TopicSync

log = logging.getLogger("memstream.shards")

MakeLocalShard = Callable[[int, SlateJournal], LocalShard]
"""Builds shard k's relay and topic guard over its open journal (and registers the relay's wake-up)."""

CLOSE_TIMEOUT_S = 2.5
"""How long closing a shard may take (under the loop's fence margin of 2 s plus a round)."""


@dataclass
class _Running:
    local: LocalShard
    stop: asyncio.Event
    tasks: list[asyncio.Task[None]]


class ShardHost:
    """See the module doc. `shards` is the node's list of local shards (shared with the admin API
    and the metrics, kept in shard order)."""

    def __init__(
        self,
        settings: Settings,
        journals: ShardedJournal[SlateJournal],
        shards: list[LocalShard],
        topic_sync: TopicSync,
        make_local_shard: MakeLocalShard,
        *,
        timeout_s: float = CLOSE_TIMEOUT_S,
        open_timeout_s: float = 30.0,
    ) -> None:
        self.settings = settings
        self.journals = journals
        self.shards = shards
        self.topic_sync = topic_sync
        self.make_local_shard = make_local_shard
        self.timeout_s = timeout_s
        self.open_timeout_s = open_timeout_s
        self._running: dict[int, _Running] = {}
        self._locks: dict[int, asyncio.Lock] = {}

    @property
    def open_shards(self) -> frozenset[int]:
        return frozenset(self._running)

    async def open_shard(self, shard: int, epoch: int) -> None:
        """Start serving `shard` (module doc); its error when it cannot (nothing left open)."""
        async with self._locks.setdefault(shard, asyncio.Lock()):
            if shard in self._running:
                return
            await asyncio.wait_for(self._open(shard, epoch), self.open_timeout_s)

    async def _open(self, shard: int, epoch: int) -> None:
        settings = self.settings
        journal = await SlateJournal.open(
            settings.shard_journal(shard),
            s3=settings.s3,
            flush_interval_ms=settings.journal_flush_interval_ms,
            max_message_bytes=settings.journal_max_message_bytes,
            shard=shard,
            shards=settings.journal_shards,
        )
        try:
            local = self.make_local_shard(shard, journal)
            self.topic_sync.guards.append(local.guard)
            try:
                await self.topic_sync.check()  # the shard's progress on its topic, before its relay runs
            except BaseException:
                self.topic_sync.guards.remove(local.guard)
                raise
        except BaseException:
            with contextlib.suppress(Exception):
                await journal.close()
            raise
        self.journals.attach(shard, journal)
        self.shards.append(local)
        self.shards.sort(key=lambda s: s.shard)
        stop = asyncio.Event()
        tasks = [
            asyncio.create_task(local.relay.run(stop), name=f"relay shard {shard}"),
            asyncio.create_task(self._watch_fence(shard, journal, stop), name=f"fence-watch shard {shard}"),
        ]
        self._running[shard] = _Running(local, stop, tasks)
        log.info("journal shard %d open on this node (lease epoch %d)", shard, epoch)

    async def _watch_fence(self, shard: int, journal: SlateJournal, stop: asyncio.Event) -> None:
        try:
            await watch_fence(journal, stop)
        except JournalFenced as exc:
            log.error(
                "journal shard %d: another node opened it (%s); closing it here: its lease ran out "
                "before this node renewed it",
                shard,
                exc,
            )
            asyncio.get_running_loop().create_task(self._close_quietly(shard), name=f"fenced shard {shard}")

    async def _close_quietly(self, shard: int) -> None:
        with contextlib.suppress(Exception):
            await self.close_shard(shard)

    async def close_shard(self, shard: int) -> None:
        """Stop serving `shard` (module doc); raises when it did not close in time."""
        async with self._locks.setdefault(shard, asyncio.Lock()):
            running = self._running.pop(shard, None)
            if running is None:
                return
            local = running.local
            with contextlib.suppress(Exception):
                self.journals.detach(shard)
            with contextlib.suppress(ValueError):
                self.shards.remove(local)
            with contextlib.suppress(ValueError):
                self.topic_sync.guards.remove(local.guard)
            running.stop.set()
            try:
                await asyncio.wait_for(self._stop(running), self.timeout_s)
            except TimeoutError:
                for task in running.tasks:
                    task.cancel()
                raise TimeoutError(f"journal shard {shard} did not close within {self.timeout_s} s") from None
            log.info("journal shard %d closed on this node", shard)

    async def _stop(self, running: _Running) -> None:
        results = await asyncio.gather(*running.tasks, return_exceptions=True)
        for task, result in zip(running.tasks, results, strict=True):
            if isinstance(result, Exception):
                log.warning("%s ended with %r", task.get_name(), result)
        try:
            await running.local.journal.close()
        finally:
            await running.local.relay.close()

    async def close_all(self) -> None:
        """Close every shard still open (a node stopping after its membership loop did not)."""
        for shard in sorted(self._running):
            try:
                await self.close_shard(shard)
            except Exception as exc:
                log.warning("closing journal shard %d: %r", shard, exc)
