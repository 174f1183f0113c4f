"""Driving and watching the agent memory of a running node from a bench (bench_memory_http).

`Memory` calls the memory tools (`POST /v1/agents/{agent}/tools/{tool}`) through `http_clients`,
counting failed calls by status and error code rather than raising; `Projection` reads the
`qdrant-projection` group's committed offsets and the end of `memory.entries` from the broker;
`Meters` gives the CPU share of the stack's processes and of the bench itself between samples.

The benches run as scripts (`.venv/bin/python bench/bench_x.py`), so this module is imported as
`memory_node` from the bench directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import statistics
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any

import httpx
from bench_memory import Spec
from embedded_node import CpuMeter

from memstream.ops.replay import BrokerOpFailed, GroupOffsets
from processors import qdrant_projection

PROJECTION = "qdrant-projection"


@contextlib.asynccontextmanager
async def http_clients(url: str, key: str, count: int) -> AsyncIterator[list[httpx.AsyncClient]]:
    """`count` clients of the node at `url` with API key `key`, 8 connections each (`Memory` doc)."""
    limits = httpx.Limits(max_connections=8, max_keepalive_connections=8)
    headers = {"Authorization": f"Bearer {key}"}
    async with contextlib.AsyncExitStack() as stack:
        yield [
            await stack.enter_async_context(
                httpx.AsyncClient(base_url=url, headers=headers, timeout=60, limits=limits)
            )
            for _ in range(count)
        ]


class Memory:
    """The memory tools over HTTP; a failed call is counted in `errors` (status and code) and None.

    Calls go round-robin to `clients`: httpx scans every connection of its pool on each request,
    so one client with a hundred connections costs this process milliseconds per call (several
    small pools do not)."""

    def __init__(self, clients: Sequence[httpx.AsyncClient], errors: Counter[str]) -> None:
        self.clients, self.errors = itertools.cycle(clients), errors
        self.latencies: list[float] = []  # of the `store` calls
        self.stored = 0

    async def bind(self, agents: Iterable[str]) -> None:
        for agent in sorted(set(agents)):
            response = await next(self.clients).put(f"/v1/agents/{agent}", json={"capabilities": ["memory"]})
            response.raise_for_status()

    async def call(self, agent: str, tool: str, arguments: dict[str, Any], user: str | None) -> Any:
        body = {"arguments": arguments, "user_id": user}
        try:
            response = await next(self.clients).post(f"/v1/agents/{agent}/tools/{tool}", json=body)
        except httpx.TransportError as exc:
            self.errors[f"{tool}: {type(exc).__name__}"] += 1
            return None
        if response.status_code == 200:
            return response.json()["result"]
        try:
            code = response.json()["error"]["code"]
        except (ValueError, KeyError, TypeError):
            code = response.text[:80]
        self.errors[f"{tool}: {response.status_code} {code}"] += 1
        return None

    async def store(self, s: Spec) -> None:
        """`memory_store` of `s`, timed into `latencies` and counted into `stored` when it succeeds."""
        arguments = {"key": s.key, "content": s.content, "category": s.category, "scope": s.visibility}
        t0 = time.perf_counter()
        result = await self.call(
            s.scope.agent_id, "memory_store", {**arguments, "importance": s.importance}, s.scope.user_id
        )
        self.latencies.append(time.perf_counter() - t0)
        self.stored += result is not None

    async def recall(self, agent: str, user: str | None, query: str) -> Any:
        return await self.call(agent, "memory_recall", {"query": query, "limit": 5}, user)

    def reset(self) -> None:
        self.latencies, self.stored = [], 0


class Projection:
    """The qdrant-projection group on the broker: offsets summed over the partitions of memory.entries."""

    def __init__(self, bootstrap: str, prefix: str) -> None:
        self.offsets = GroupOffsets(bootstrap)
        self.group = f"{prefix}memstream.{PROJECTION}"  # processor.group_id
        self.topic = prefix + qdrant_projection.SOURCE_TOPIC
        self.tps = self.offsets.partitions([self.topic])

    async def committed(self) -> int:
        """One admin request (milliseconds): usable as a fast poll."""
        found = await asyncio.to_thread(self.offsets.committed, self.group, self.tps)
        return sum(offset or 0 for offset in found.values())

    async def read(self) -> tuple[int, int] | None:
        """(committed, end) summed over the partitions, a partition's end counted no lower than its
        committed offset (lag >= 0, as `total_lag`); the ends are read from the partitions (about
        0.5 s, GroupOffsets doc).
        None when the broker did not answer in time (a loaded machine): the caller reads again."""
        try:
            lags = await asyncio.to_thread(self.offsets.lag, self.group, [self.topic])
        except BrokerOpFailed:
            return None
        return sum(p.committed or 0 for p in lags), sum(max(p.end, p.committed or 0) for p in lags)

    async def end(self) -> int:
        """The topic's end (records ever published); BrokerOpFailed after 5 failed readings."""
        for _ in range(5):
            offsets = await self.read()
            if offsets is not None:
                return offsets[1]
        raise BrokerOpFailed(f"the end of {self.tps} could not be read 5 times in a row")

    async def wait_drained(self, target: int, within_s: float) -> float | None:
        """When (monotonic) the committed offsets were seen to reach `target` and the topic's end;
        None if not within `within_s`."""
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline:
            seen = time.monotonic()
            if await self.committed() >= target:
                offsets = await self.read()
                if offsets is not None and offsets[0] >= offsets[1]:
                    return seen
            await asyncio.sleep(0.1)
        return None


class Meters:
    """CPU share (1.0 = a core) of the stack's processes and of this bench, between samples."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.meters = {name: CpuMeter(pid) for name, pid in pids.items()}
        self.restart()

    def restart(self) -> None:
        for meter in self.meters.values():
            meter.start()
        self.mine, self.at = time.process_time(), time.monotonic()
        self.shares: dict[str, list[float]] = {name: [] for name in [*self.meters, "bench"]}

    def sample(self) -> str:
        dt = max(1e-3, time.monotonic() - self.at)
        for name, meter in self.meters.items():
            self.shares[name].append((meter.seconds() or 0.0) / dt)
            meter.start()
        self.shares["bench"].append((time.process_time() - self.mine) / dt)
        self.mine, self.at = time.process_time(), time.monotonic()
        return ", ".join(f"{n} {s[-1]:.0%}" for n, s in self.shares.items())

    def medians(self) -> str:
        parts = [f"{n} {statistics.median(s):.2f}" for n, s in self.shares.items() if s]
        return "CPU medians (1.0 = a core): " + ", ".join(parts)
