"""`MembershipLoop`: a node's part in the shard membership, over a `ShardLeaseStore`.

Every `heartbeat_s` (1 s) a round: announce the node (`heartbeat`: its id, URL and roles), renew
every lease it holds for `ttl_s` (5 s), read the leases and the live nodes (heard from within
`ttl_s`), and apply `core.sharding.membership.plan`: for a shard to give up, `close_shard(k)` first
and then release the lease (nobody can open it before it is closed here); for a shard to take,
claim it and then `open_shard(k, epoch)`. The callbacks belong to the node (part of its wiring:
they open and close the shard's journal writer, relay and so on). A callback that fails: an open
releases the claim (and the shard is not claimed again for `retry_s`); a close leaves the lease to
run out instead of releasing it (the journal's own fence stops a writer that was not closed).

**Self-fencing.** A lease renewed at monotonic instant t (taken before the request was sent) may
have run out at t + `ttl_s` at the latest. A watchdog task, independent of the rounds (a store call
that hangs cannot hold it up), closes every shard whose lease was not renewed since
t + `ttl_s` - `fence_margin_s`: a node cut off from the store stops writing before another node may
take its shards. A renewal the store refuses (the lease was lost) closes the shard at once. Every
store call is bounded by `call_timeout_s`; a lease the store lists under this node's id that the
loop does not hold (a claim whose answer was lost, a shard it fenced) is released.

`run(stop)` returns when `stop` is set, after closing and releasing every shard and forgetting the
node (`leave`). Cancelling `run` stops it where it is, as a crash would: shards are neither closed
nor released, and the others take them once the leases run out (within `ttl_s` and a round).

`node_id` must be unique for each start of a node (`new_node_id`): a lease is held by a process,
not by a machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TypeVar

from core.sharding.membership import plan
from core.stores.shard_leases import NodeInfo, ShardLease, ShardLeaseStore

log = logging.getLogger("memstream.membership")

OpenShard = Callable[[int, int], Awaitable[None]]
"""`open_shard(shard, epoch)`: start serving the shard (its lease is held at `epoch`)."""
CloseShard = Callable[[int], Awaitable[None]]
"""`close_shard(shard)`: stop serving the shard; nothing of it is written afterwards."""
T = TypeVar("T")


def new_node_id(name: str) -> str:
    """A node id for one start of node `name` (e.g. the host name): `name` and a random suffix."""
    return f"{name}-{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class MembershipConfig:
    """One node's membership settings (module doc)."""

    node_id: str
    url: str
    """Where the other nodes reach this node's API (they forward requests there)."""
    shards: int
    roles: frozenset[str] = frozenset()
    heartbeat_s: float = 1.0
    ttl_s: float = 5.0
    fence_margin_s: float = 2.0
    """How long before its lease may run out an unrenewed shard is closed."""
    call_timeout_s: float | None = None
    """The longest a store call may take (default: `heartbeat_s`)."""
    retry_s: float | None = None
    """How long a shard whose opening failed is not claimed again (default: `ttl_s`)."""

    def __post_init__(self) -> None:
        if self.shards < 1:
            raise ValueError(f"shards must be at least 1, not {self.shards}")
        if self.heartbeat_s <= 0 or self.fence_margin_s <= 0:
            raise ValueError("heartbeat_s and fence_margin_s must be positive")
        if not self.ttl_s > self.heartbeat_s + self.fence_margin_s + self.timeout_s:
            raise ValueError(
                f"ttl_s ({self.ttl_s}) must exceed heartbeat_s + fence_margin_s + call_timeout_s "
                f"({self.heartbeat_s} + {self.fence_margin_s} + {self.timeout_s}): a healthy node renews "
                "its leases every heartbeat and must never close its shards for want of a renewal"
            )

    @property
    def timeout_s(self) -> float:
        return self.call_timeout_s if self.call_timeout_s is not None else self.heartbeat_s

    @property
    def cooldown_s(self) -> float:
        return self.retry_s if self.retry_s is not None else self.ttl_s


@dataclass(frozen=True)
class View:
    """What the loop last read of the store: its clock, every lease, the live nodes, and the
    monotonic instant it was read at."""

    now: datetime
    leases: tuple[ShardLease, ...]
    nodes: tuple[NodeInfo, ...]
    read_at: float


@dataclass
class _Held:
    lease: ShardLease
    deadline: float
    """Monotonic instant by which the lease may have run out (the last renewal's send + ttl)."""


@dataclass
class _State:
    """The shards of this node: `held` (opening or open), `closing` (being closed), `closed` (closed,
    the lease to release), `abandoned` (the close failed: the lease is left to run out)."""

    held: dict[int, _Held] = field(default_factory=dict)
    closing: set[int] = field(default_factory=set)
    closed: dict[int, ShardLease] = field(default_factory=dict)
    abandoned: dict[int, ShardLease] = field(default_factory=dict)
    cooldown: dict[int, float] = field(default_factory=dict)
    locks: dict[int, asyncio.Lock] = field(default_factory=dict)
    opening: set[asyncio.Task[None]] = field(default_factory=set)

    def lock(self, shard: int) -> asyncio.Lock:
        return self.locks.setdefault(shard, asyncio.Lock())

    def ours(self, shard: int) -> bool:
        """Whether the loop knows what it does with the shard's lease (not an orphan)."""
        return shard in self.held or shard in self.closing or shard in self.abandoned


class MembershipLoop:
    """See the module doc."""

    def __init__(
        self,
        store: ShardLeaseStore,
        config: MembershipConfig,
        open_shard: OpenShard,
        close_shard: CloseShard,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.config = config
        self._open = open_shard
        self._close = close_shard
        self._clock = clock
        self._state = _State()
        self._changed = asyncio.Event()
        self.view: View | None = None
        """The last view of the store (None before the first complete round)."""

    @property
    def open_shards(self) -> frozenset[int]:
        """The shards this node holds (opened, or being opened)."""
        return frozenset(self._state.held)

    def leases(self) -> dict[int, ShardLease]:
        """The leases this node holds, by shard."""
        return {k: held.lease for k, held in self._state.held.items()}

    async def run(self, stop: asyncio.Event) -> None:
        """Take part until `stop` is set, then give every shard up (module doc)."""
        watchdog = asyncio.create_task(self._watchdog(), name="membership-fence")
        try:
            while not stop.is_set():
                started = self._clock()
                await self.round()
                pause = max(0.0, self.config.heartbeat_s - (self._clock() - started))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), pause)
            await self._leave()
        finally:
            watchdog.cancel()
            for task in [watchdog, *self._state.opening]:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def round(self) -> None:
        """One heartbeat, the renewals, one read of the store, one plan applied (the shards to take
        are opened in tasks of their own: a slow open holds up no renewal)."""
        cfg = self.config
        now = await self._try("heartbeat", self.store.heartbeat(cfg.node_id, cfg.url, cfg.roles))
        await asyncio.gather(*(self._renew(k) for k in list(self._state.held)))
        await self._release_closed()
        if now is None:
            return
        leases = await self._try("read the leases", self.store.owners())
        nodes = await self._try("read the live nodes", self.store.live_nodes(cfg.ttl_s))
        if leases is None or nodes is None:
            return
        self.view = View(now, tuple(leases), tuple(nodes), self._clock())
        leases = await self._without_orphans(leases, now)
        planned = plan(cfg.shards, leases, [n.node_id for n in nodes], cfg.node_id, now)
        for k in planned.release:
            await self._give_up(k)
        for k in planned.claim:
            if self._state.cooldown.get(k, 0.0) <= self._clock():
                await self._take(k)

    # ---- the steps ---------------------------------------------------------------------------------

    async def _renew(self, shard: int) -> None:
        held = self._state.held.get(shard)
        if held is None:
            return
        sent = self._clock()
        try:
            renewed = await self._call(self.store.renew(held.lease, self.config.ttl_s))
        except Exception as exc:  # unknown: the watchdog closes the shard if it stays so
            log.warning("could not renew the lease of shard %d (%s); retrying", shard, _why(exc))
            return
        if self._state.held.get(shard) is not held:
            return  # closed meanwhile (fenced)
        if renewed is not None:
            held.lease, held.deadline = renewed, sent + self.config.ttl_s
            self._changed.set()
            return
        async with self._state.lock(shard):  # after an open in progress
            if self._state.held.get(shard) is held:
                log.error("lost the lease of shard %d (epoch %d): closing it", shard, held.lease.epoch)
                await self._stop_serving(shard)

    async def _take(self, shard: int) -> None:
        """Claim the shard; when it is ours, open it in a task of its own."""
        sent = self._clock()
        claim = self.store.claim(shard, self.config.node_id, self.config.ttl_s)
        lease = await self._try(f"claim shard {shard}", claim)
        if lease is None:
            return  # taken by another node (or unknown: an orphan, released next round)
        self._state.held[shard] = _Held(lease, sent + self.config.ttl_s)
        self._changed.set()
        task = asyncio.create_task(self._open_shard(shard, lease), name=f"open-shard-{shard}")
        self._state.opening.add(task)
        task.add_done_callback(self._state.opening.discard)

    async def _open_shard(self, shard: int, lease: ShardLease) -> None:
        async with self._state.lock(shard):
            if self._state.held.get(shard, None) is None:
                return
            try:
                await self._open(shard, lease.epoch)
            except Exception:
                log.exception("opening shard %d (epoch %d) failed: releasing its lease", shard, lease.epoch)
                self._state.held.pop(shard, None)
                self._state.cooldown[shard] = self._clock() + self.config.cooldown_s
                self._state.closed[shard] = lease
                self._changed.set()
                await self._release_closed()
                return
        log.info("serving shard %d (epoch %d)", shard, lease.epoch)

    async def _give_up(self, shard: int) -> None:
        """Close the shard, then release its lease (a handover)."""
        async with self._state.lock(shard):
            if shard in self._state.held:
                log.info("handing shard %d over to another node", shard)
                await self._stop_serving(shard)
        await self._release_closed()

    async def _stop_serving(self, shard: int) -> None:
        """Close the shard (its lock held) and forget it: its lease is then released (`closed`), or
        left to run out when the close failed (`abandoned`)."""
        held = self._state.held.pop(shard)
        self._state.closing.add(shard)
        self._changed.set()
        try:
            await self._close(shard)
        except Exception:
            log.exception("closing shard %d failed: its lease is left to run out", shard)
            self._state.abandoned[shard] = held.lease
        else:
            self._state.closed[shard] = held.lease
        finally:
            self._state.closing.discard(shard)

    async def _release_closed(self) -> None:
        """Release the leases of the shards closed here (best effort: the store may be away; a lease
        taken meanwhile is not ours any more and its release is refused, which is as good)."""
        for shard, lease in list(self._state.closed.items()):
            if await self._try(f"release shard {shard}", self.store.release(lease)) is not None:
                if self._state.closed.get(shard) is lease:
                    del self._state.closed[shard]

    async def _without_orphans(self, leases: Sequence[ShardLease], now: datetime) -> list[ShardLease]:
        """`leases` without the ones under this node's id that the loop does not account for (a
        claim whose answer was lost), which are released, and without abandoned ones that ran out."""
        kept = []
        for lease in leases:
            mine = lease.node_id == self.config.node_id
            if mine and lease.shard in self._state.abandoned and not lease.valid_at(now):
                del self._state.abandoned[lease.shard]
            if mine and not self._state.ours(lease.shard) and lease.shard not in self._state.closed:
                if lease.valid_at(now):
                    log.warning(
                        "releasing shard %d: leased to this node, which does not serve it", lease.shard
                    )
                    await self._try(f"release shard {lease.shard}", self.store.release(lease))
                continue
            kept.append(lease)
        return kept

    async def _watchdog(self) -> None:
        """Close every shard whose lease may run out within `fence_margin_s` (module doc)."""
        margin = self.config.fence_margin_s
        while True:
            self._changed.clear()
            due = [(held.deadline - margin, k) for k, held in self._state.held.items()]
            wait = min(due)[0] - self._clock() if due else None
            if wait is None or wait > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), wait)
                continue
            for at, shard in sorted(due):
                if at <= self._clock():
                    await self._fence(shard)

    async def _fence(self, shard: int) -> None:
        async with self._state.lock(shard):
            held = self._state.held.get(shard)
            if held is None or held.deadline - self.config.fence_margin_s > self._clock():
                return  # renewed or closed meanwhile
            log.error(
                "the lease of shard %d (epoch %d) was not renewed for %.1f s: closing the shard before "
                "it may run out and another node takes it",
                shard,
                held.lease.epoch,
                self.config.ttl_s - self.config.fence_margin_s,
            )
            await self._stop_serving(shard)

    async def _leave(self) -> None:
        for task in list(self._state.opening):
            with contextlib.suppress(Exception):
                await task
        for shard in sorted(self._state.held):
            await self._give_up(shard)
        await self._try("leave", self.store.leave(self.config.node_id))

    # ---- store calls -------------------------------------------------------------------------------

    async def _call(self, call: Awaitable[T]) -> T:
        return await asyncio.wait_for(call, self.config.timeout_s)

    async def _try(self, what: str, call: Awaitable[T]) -> T | None:
        """The call's result; None (logged) when it failed or took longer than `call_timeout_s`."""
        try:
            return await self._call(call)
        except Exception as exc:
            log.warning("membership: could not %s (%s)", what, _why(exc))
            return None


def _why(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "the store did not answer in time"
    return f"{type(exc).__name__}: {exc}"
