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
that existed before this check, the topic is trusted as it was and its identity recorded; a topic
with nothing stored that this node created is refilled (logged at INFO: on a new deployment its
first node creates every topic, and there is nothing to refill). Several nodes starting at once
create each topic once between them (`streams.admin.apply_topics` tells a creation it lost to
another node from its own), so one of them refills it and the others record or find its identity.

The guards (`streams.topic_guards`): `journal.messages` (one per journal shard: identity beside
the shard's relay cursor in its journal), `memory.entries` and the two compaction topics (identity
in Postgres).

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

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from core.config import Settings
from core.errors import JournalFenced
from streams.admin import TopicAdminError, apply_topics
from streams.identity import fingerprint, topic_identity
from streams.topic_guards import TopicGuard
from streams.topics import TopicRegistry, default_registry, topic_name

log = logging.getLogger("memstream.topic_sync")

CHECK_INTERVAL_S = 10.0
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
            replaced = dict.fromkeys(state.guard.name for state in found if state.replaced)
            await self._restart_consumers(list(replaced))  # once per topic (a guard per journal shard)
            for state in found:
                if await self._settle(state) and state.guard.name not in refilled:
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
        done = await guard.refill()
        await guard.store(current)
        if done is None:
            return False
        self.refills += 1
        if stored == 0:  # this start created it and no identity was ever recorded: a new deployment
            log.info(
                "%s on %s: created by this node with no identity recorded before (a new deployment, "
                "or a broker that lost it before any was recorded): %s",
                broker_name,
                bootstrap,
                done,
            )
        else:
            log.warning(
                "%s on %s is not the topic the stored progress was confirmed on (a broker that lost it, "
                "or another node's broker): %s",
                broker_name,
                bootstrap,
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
