"""Membership loops for tests: `Shards` stands for the nodes' journals (it records which loop
serves which shard and every time two serve one at once), `Partitionable` is a lease store a test
can cut off, `Node` runs a loop in a task, `eventually` waits for a condition."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from core.stores.shard_leases import NodeInfo, ShardLease, ShardLeaseStore
from memstream.sharding.membership_loop import MembershipConfig, MembershipLoop, new_node_id


class Shards:
    """Which loop serves which shard; `overlaps` lists every open of a shard another loop served."""

    def __init__(self) -> None:
        self.serving: dict[int, str] = {}
        self.overlaps: list[tuple[int, str, str]] = []
        self.opened: list[tuple[str, int, int]] = []
        self.closed: list[tuple[str, int]] = []
        self.fail_open: set[int] = set()
        self.fail_close: set[int] = set()
        self.on_close: Callable[[str, int], Awaitable[None]] | None = None

    def callbacks(
        self, node: str
    ) -> tuple[Callable[[int, int], Awaitable[None]], Callable[[int], Awaitable[None]]]:
        async def open_shard(shard: int, epoch: int) -> None:
            if shard in self.fail_open:
                raise RuntimeError(f"shard {shard} does not open")
            other = self.serving.get(shard)
            if other is not None and other != node:
                self.overlaps.append((shard, other, node))
            self.serving[shard] = node
            self.opened.append((node, shard, epoch))

        async def close_shard(shard: int) -> None:
            if self.on_close is not None:
                await self.on_close(node, shard)
            if shard in self.fail_close:
                raise RuntimeError(f"shard {shard} does not close")
            if self.serving.get(shard) == node:
                del self.serving[shard]
            self.closed.append((node, shard))

        return open_shard, close_shard

    def crashed(self, node: str) -> None:
        """The node's process died: it serves nothing any more."""
        self.serving = {k: n for k, n in self.serving.items() if n != node}

    def of(self, node: str) -> set[int]:
        return {k for k, n in self.serving.items() if n == node}


class Partitionable:
    """A store that a test can cut off: every call then fails (or hangs, when `hang`)."""

    def __init__(self, store: ShardLeaseStore) -> None:
        self.store = store
        self.cut = False
        self.hang = False

    async def _gate(self) -> None:
        if self.cut:
            if self.hang:
                await asyncio.Event().wait()
            raise ConnectionRefusedError("the network to the store is cut")

    async def heartbeat(self, node_id: str, url: str, roles: frozenset[str] = frozenset()) -> datetime:
        await self._gate()
        return await self.store.heartbeat(node_id, url, roles)

    async def leave(self, node_id: str) -> None:
        await self._gate()
        await self.store.leave(node_id)

    async def live_nodes(self, within_s: float) -> list[NodeInfo]:
        await self._gate()
        return await self.store.live_nodes(within_s)

    async def claim(self, shard: int, node_id: str, ttl_s: float) -> ShardLease | None:
        await self._gate()
        return await self.store.claim(shard, node_id, ttl_s)

    async def renew(self, lease: ShardLease, ttl_s: float) -> ShardLease | None:
        await self._gate()
        return await self.store.renew(lease, ttl_s)

    async def release(self, lease: ShardLease) -> bool:
        await self._gate()
        return await self.store.release(lease)

    async def owners(self) -> list[ShardLease]:
        await self._gate()
        return list(await self.store.owners())


FAST: dict[str, Any] = {"heartbeat_s": 0.25, "ttl_s": 2.0, "fence_margin_s": 0.75, "call_timeout_s": 0.5}
"""Timings for tests: a lease of 2 s renewed every 0.25 s, closed 0.75 s before it may run out."""


class Node:
    """A membership loop running in a task, as a node would run it."""

    def __init__(
        self,
        store: ShardLeaseStore,
        shards: Shards,
        count: int,
        name: str,
        node_id: str = "",
        timing: dict[str, Any] | None = None,
        roles: frozenset[str] = frozenset(),
    ) -> None:
        self.store = Partitionable(store)
        self.id = node_id or new_node_id(name)
        self.url = f"http://{name}:8080"
        config = MembershipConfig(
            node_id=self.id, url=self.url, shards=count, roles=roles, **(timing or FAST)
        )
        open_shard, close_shard = shards.callbacks(self.id)
        self.loop = MembershipLoop(self.store, config, open_shard, close_shard)
        self.stop = asyncio.Event()
        self.task = asyncio.create_task(self.loop.run(self.stop))

    async def stopped(self) -> None:
        self.stop.set()
        await asyncio.wait_for(self.task, 10)

    async def crash(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


async def eventually(check: Callable[[], bool], within_s: float, what: str) -> None:
    deadline = time.monotonic() + within_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within_s} s: {what}")
        await asyncio.sleep(0.02)
