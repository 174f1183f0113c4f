"""Agent memory as users meet it: the memory tools over HTTP on the whole node (issue 11; prints figures).

    .venv/bin/python bench/bench_memory_http.py            # embedded node, 100,000 entries (long)
    .venv/bin/python bench/bench_memory_http.py --quick    # 5,000 entries, 20 s of steady stores
    .venv/bin/python bench/bench_memory_http.py --url http://127.0.0.1:8080 --key-file .memstream/api-key \\
        --bootstrap 127.0.0.1:9092

Without `--url` it starts `memstream up` in a temp directory (as bench_sustained) and waits until
/readyz says `qdrant-projection` runs. Calls are `POST /v1/agents/{agent}/tools/{tool}` from async
httpx clients in this process (its CPU is printed beside the stack's); agents (named with a run id)
are bound to `memory` first. Lag is read from the broker: the `qdrant-projection` group's committed
offsets on `memory.entries` (committed once the points are upserted and flushed) and the topic's end.
1. Population: `--entries` `memory_store` calls from `--concurrency` callers, spread as bench_memory
   does (400 per agent, 10 users each, its category/visibility mix and texts): store rate and
   latency; the projection drain (first store -> every stored entry committed and lag 0), its rate
   while it had a backlog, and the drain of the backlog left when the stores ended (the goal's
   "backlog embedding", the projection with no HTTP load, when >= 1,000 were left; else the whole
   drain, which the store rate then bounds).
2. Recall at that size: `--queries` `memory_recall` calls (limit 5, bench_memory's questions, random
   agent, 70% with a user) one at a time, then from 8 callers: latency, answering path, recalls/s.
3. `--duration` s of stores at `--rate` (open loop, <= `--max-inflight` in flight) while every
   `--probe-every` s a probe stores an entry with a unique word (agents of its own) and recalls the
   word every `--poll-ms` until the entry comes back on the `qdrant` path: store acknowledged ->
   recallable (up to one poll late; the polls are recall load too). The lag is sampled about every
   second (median, max, trend after `--ramp` s as in bench_sustained), then the catch-up time.
A summary states issue 11's three memory goals with the figures measured and MET/NOT MET.

Re-measuring 2-3 without populating again: `--keep` keeps the work directory (its path and the run
id are printed); `--work DIR --reuse RUN` starts `memstream up` on that directory's data again and
skips 1, recalling the agents of run RUN (`--entries` must be its population's size). With `--url`,
`--reuse RUN` alone skips 1 on a running node.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import math
import statistics
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from bench_memory import SLOTS_PER_AGENT, Spec, queries, specs
from bench_sustained import memstream_processes, slope
from embedded_node import Node, node_for
from figures import load_note, pct
from memory_node import PROJECTION, Memory, Meters, Projection, http_clients
from server_group import server_group

PROBES_PER_AGENT = 100  # within the per-agent project_fact capacity (200)


def ms(values: list[float]) -> str:
    return f"p50 {pct(values, 0.5) * 1e3:.1f} ms, p99 {pct(values, 0.99) * 1e3:.1f} ms" if values else "-"


@dataclass
class Figures:
    """What the summary needs."""

    entries: int = 0
    backlog_rate: float | None = None
    backlog_note: str = ""
    recall_ms: tuple[float, float] | None = None
    probes: list[float] = field(default_factory=list)  # seconds
    steady_rate: float = 0.0
    errors: Counter[str] = field(default_factory=Counter)


@dataclass
class Run:
    """One run: its options, the node's memory tools, the broker's view of the projection, meters."""

    args: argparse.Namespace
    mem: Memory
    proj: Projection
    meters: Meters
    fig: Figures

    async def sample_until(self, done: asyncio.Future[Any], line: Any) -> list[tuple[float, int, int]]:
        """(elapsed s, committed, lag) about every second until `done`; every 5 s a progress line
        with `line(committed, lag)`."""
        points: list[tuple[float, int, int]] = []
        began = printed = time.monotonic()
        self.meters.restart()
        while not done.done():
            await asyncio.wait([done], timeout=1.0)
            offsets = await self.proj.read()
            cpu, now = self.meters.sample(), time.monotonic()
            if offsets is None:
                self.fig.errors["lag sample: the broker did not answer within 10 s"] += 1
                continue
            committed, end = offsets
            points.append((now - began, committed, end - committed))
            if now - printed >= 5:
                printed = now
                print(f"   {now - began:5.0f} s  {line(committed, end - committed)}  CPU {cpu}", flush=True)
        done.result()
        return points


# ---- 1. population ---------------------------------------------------------------------------------


async def populate(run: Run) -> int:
    args, mem, fig = run.args, run.mem, run.fig
    items = specs(7, f"{args.run}-agent", args.entries, datetime.now(UTC))
    agents = {s.scope.agent_id for s in items}
    await mem.bind(agents)
    print(
        f"\n== 1. population: {len(items):,} memory_store calls over {len(agents)} agents, "
        f"{args.concurrency} callers ({load_note()})",
        flush=True,
    )
    c0 = await run.proj.end()  # nothing of ours before it
    queue = iter(items)

    async def caller() -> None:
        for s in queue:
            await mem.store(s)

    began = time.monotonic()
    storing = asyncio.gather(*(caller() for _ in range(args.concurrency)))
    points = await run.sample_until(
        storing, lambda c, lag: f"stored {len(mem.latencies):,}  indexed {c - c0:,}  lag {lag:,}"
    )
    stores_s, calls = time.monotonic() - began, len(mem.latencies)
    left = mem.stored - (await run.proj.committed() - c0)
    seen = await run.proj.wait_drained(c0 + mem.stored, args.drain)
    print(
        f"  memory_store: {calls:,} calls in {stores_s:.1f} s = {calls / stores_s:,.0f}/s, "
        f"{ms(mem.latencies)}, {mem.stored:,} stored ({load_note()})"
    )
    busy = [(b[0] - a[0], b[1] - a[1]) for a, b in itertools.pairwise(points) if a[2] and b[2]]
    if sum(t for t, _ in busy):
        rate = sum(n for _, n in busy) / sum(t for t, _ in busy)
        print(f"  projection rate while it had a backlog during the stores: {rate:,.0f} entries/s")
    if seen is None:
        print(f"  !! projection drain: not done {args.drain:.0f} s after the stores")
    else:
        drain_s = seen - began
        print(
            f"  projection drain: first store -> all {mem.stored:,} indexed in {drain_s:.1f} s = "
            f"{mem.stored / drain_s:,.0f}/s"
        )
        if left >= 1_000:  # smaller backlogs drain within a few commits: too short to time
            fig.backlog_rate = left / max(1e-3, drain_s - stores_s)
            fig.backlog_note = (
                f"{left:,} entries left when the stores ended, drained in {drain_s - stores_s:.1f} s"
            )
            print(f"  backlog after the stores: {fig.backlog_note} = {fig.backlog_rate:,.0f} entries/s")
        else:  # the projection kept up: the drain is all there is, and the store rate bounds it
            fig.backlog_rate = mem.stored / drain_s
            fig.backlog_note = f"first store -> all indexed; bounded by the {calls / stores_s:,.0f} stores/s"
    print(f"  {run.meters.medians()}", flush=True)
    fig.entries = mem.stored
    return len(agents)


# ---- 2. recall -------------------------------------------------------------------------------------


async def recalls(run: Run, seed: int, agents: int, callers: int) -> tuple[list[float], Counter[str], float]:
    """`--queries` recalls from `callers` concurrent callers: latencies, answering paths, hits per query."""
    workload = iter(queries(seed, run.args.queries, agents))
    latencies: list[float] = []
    paths: Counter[str] = Counter()

    population = run.args.reuse or run.args.run

    async def caller() -> None:
        for scope, text in workload:
            t0 = time.perf_counter()
            result = await run.mem.recall(f"{population}-{scope.agent_id}", scope.user_id, text)
            latencies.append(time.perf_counter() - t0)
            if result is not None:
                paths[result["path"]] += 1
                paths["hits"] += result["count"]

    await asyncio.gather(*(caller() for _ in range(callers)))
    return latencies, paths, paths.pop("hits", 0) / max(1, len(latencies))


async def recall_phase(run: Run, agents: int) -> None:
    await recalls(run, 3, agents, 1)  # warm-up
    print(
        f"\n== 2. memory_recall, limit 5, {run.fig.entries:,} entries, {run.args.queries} queries "
        f"({load_note()})",
        flush=True,
    )
    latencies, paths, hits = await recalls(run, 11, agents, 1)
    run.fig.recall_ms = (pct(latencies, 0.5) * 1e3, pct(latencies, 0.99) * 1e3)
    print(f"  sequential: {ms(latencies)}, paths {dict(paths)}, {hits:.1f} hits/query")
    t0 = time.perf_counter()
    latencies, paths, hits = await recalls(run, 13, agents, 8)
    rate = len(latencies) / (time.perf_counter() - t0)
    print(f"  8 concurrent callers: {ms(latencies)}, {rate:,.0f} recalls/s, paths {dict(paths)}", flush=True)


# ---- 3. steady stores and probes -------------------------------------------------------------------


async def probe_loop(run: Run, stop: asyncio.Event) -> int:
    """Store -> recallable probes until `stop` (module doc); the number of probe entries stored."""
    args, mem = run.args, run.mem
    stored = polls = i = 0
    while not stop.is_set():
        began = time.monotonic()
        agent = f"{args.run}-probe-{i // PROBES_PER_AGENT}"
        if i % PROBES_PER_AGENT == 0:
            await mem.bind([agent])
        word = f"zq{args.run}p{i}"
        content = f"Release note {word}: the deployment checklist was reviewed by the team."
        arguments = {"key": f"probe.{i}", "content": content, "category": "project_fact", "scope": "shared"}
        entry = await mem.call(agent, "memory_store", arguments, None)  # no user: a shared entry
        i += 1
        if entry is None:
            continue
        acked, entry_id, stored = time.perf_counter(), entry["entry"]["entry_id"], stored + 1
        while time.perf_counter() - acked < 60:
            result = await mem.recall(agent, None, word)
            polls += 1
            hits = result["results"] if result and result["path"] == "qdrant" else []
            if any(hit["entry_id"] == entry_id for hit in hits):
                run.fig.probes.append(time.perf_counter() - acked)
                break
            await asyncio.sleep(args.poll_ms / 1000)
        else:
            mem.errors["probe not recallable within 60 s"] += 1
        await asyncio.sleep(max(0.0, args.probe_every - (time.monotonic() - began)))
    print(f"  probes: {stored} stored, {polls:,} recall polls", flush=True)
    return stored


async def steady_phase(run: Run) -> None:
    args, mem, fig = run.args, run.mem, run.fig
    items = specs(23, f"{args.run}-steady", round(args.rate * args.duration), datetime.now(UTC))
    await mem.bind(s.scope.agent_id for s in items)
    print(
        f"\n== 3. memory_store at {args.rate:,.0f}/s (open loop, <= {args.max_inflight} in flight) for "
        f"{args.duration:.0f} s, a store -> recallable probe every {args.probe_every} s ({load_note()})",
        flush=True,
    )
    e0 = await run.proj.end()
    mem.reset()
    slots = asyncio.Semaphore(args.max_inflight)

    async def one(s: Spec) -> None:
        await mem.store(s)
        slots.release()

    async def load() -> None:
        start, tasks = time.perf_counter(), []
        for i, s in enumerate(items):
            await asyncio.sleep(max(0.0, start + i / args.rate - time.perf_counter()))
            await slots.acquire()
            tasks.append(asyncio.create_task(one(s)))
        await asyncio.gather(*tasks)

    stop = asyncio.Event()
    probes = asyncio.create_task(probe_loop(run, stop))
    began = time.monotonic()
    points = await run.sample_until(
        asyncio.ensure_future(load()),
        lambda c, lag: f"stored {len(mem.latencies):,}  lag {lag:,}  probes {len(fig.probes)}",
    )
    load_s = time.monotonic() - began
    fig.steady_rate = len(mem.latencies) / load_s
    stop.set()
    seen = await run.proj.wait_drained(e0 + mem.stored + await probes, args.drain)
    print(
        f"  memory_store: {len(mem.latencies):,} calls in {load_s:.1f} s = {fig.steady_rate:,.1f}/s, "
        f"{ms(mem.latencies)}, {mem.stored:,} stored ({load_note()})"
    )
    if p := [d * 1e3 for d in fig.probes]:
        print(
            f"  store acknowledged -> recallable on the qdrant path ({len(p)} probes): p50 "
            f"{pct(p, 0.5):.0f} ms, p95 {pct(p, 0.95):.0f} ms, p99 {pct(p, 0.99):.0f} ms, max {max(p):.0f} ms"
        )
    lags = [(t, lag) for t, _, lag in points]
    growth = slope(lags, args.ramp)
    trend = (
        "-"
        if growth is None
        else f"{growth:+,.1f}/s, " + ("bounded" if growth < 0.01 * args.rate else "GROWING")
    )
    values = [v for _, v in lags] or [0]
    print(
        f"  {PROJECTION} lag: median {statistics.median(values):,.0f}, max {max(values):,}, "
        f"trend after {args.ramp:.0f} s {trend}"
    )
    caught = "never within --drain" if seen is None else f"{seen - began - load_s:.1f} s"
    print(f"  caught up after the load: {caught}\n  {run.meters.medians()}", flush=True)


# ---- summary and main ------------------------------------------------------------------------------


def summary(fig: Figures) -> None:
    def row(goal: str, measured: str, ok: bool | None) -> None:
        print(f"| {goal} | {measured} | {'-' if ok is None else 'MET' if ok else 'NOT MET'} |")

    print(f"\n== agent-memory goals of issue 11, over HTTP on the whole node ({load_note()})")
    print("| goal | measured | verdict |\n|---|---|---|")
    p = [d * 1e3 for d in fig.probes]
    p95 = pct(p, 0.95) if p else float("inf")
    measured = f"p95 {p95:.0f} ms at {fig.steady_rate:,.1f} stores/s ({len(p)} probes)"
    row(
        "memory_store -> recallable p95 <= 1 s at 100 stores/s",
        measured,
        p95 <= 1000 and fig.steady_rate >= 95,
    )
    rate = fig.backlog_rate
    measured = (
        f"{rate:,.0f} entries/s ({fig.backlog_note})" if rate else "no drain: the projection never caught up"
    )
    row("backlog embedding >= 1,000 entries/s", measured, None if rate is None else rate >= 1000)
    if fig.recall_ms is not None:
        p50, p99 = fig.recall_ms
        size = "" if fig.entries >= 100_000 else ", fewer than the goal's 100k"
        measured = f"p50 {p50:.1f} ms, p99 {p99:.1f} ms at {fig.entries:,} entries{size}"
        row("memory_recall p50 <= 10 ms / p99 <= 30 ms at 100k entries", measured, p50 <= 10 and p99 <= 30)
    for name, count in sorted(fig.errors.items()):
        print(f"ERROR: {count} x {name}")


def projection_runs(url: str, timeout_s: float = 120.0) -> None:
    """Wait until the node's /readyz says qdrant-projection is `running` (exit if it is not hosted)."""
    deadline = time.monotonic() + timeout_s
    while True:
        processors = httpx.get(f"{url}/readyz", timeout=10).json().get("processors") or {}
        state = processors.get(PROJECTION, {}).get("state")
        if state == "running":
            return
        if state is None or time.monotonic() > deadline:
            raise SystemExit(
                f"{PROJECTION} does not run in the node ({state}): see MEMSTREAM_NODE_PROCESSORS"
            )
        time.sleep(0.5)


async def bench(node: Node, args: argparse.Namespace, meters: Meters) -> None:
    fig = Figures()
    async with http_clients(node.url, node.key, 16) as clients:  # --max-inflight 64 and the probe
        run = Run(
            args, Memory(clients, fig.errors), Projection(args.bootstrap, args.topic_prefix), meters, fig
        )
        if args.reuse:  # populated by an earlier run (module doc)
            agents = math.ceil(args.entries / SLOTS_PER_AGENT)
            fig.entries = args.entries
            print(f"\n== 1. skipped: the {args.entries:,} entries of run {args.reuse} ({agents} agents)")
        else:
            agents = await populate(run)
        await recall_phase(run, agents)
        await steady_phase(run)
    summary(fig)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add = parser.add_argument
    add("--url", default=None, help="a running node (default: start `memstream up`)")
    add("--key-file", type=Path, default=None, help="API key file (with --url)")
    add("--bootstrap", default=None, help="the broker (with --url)")
    add("--topic-prefix", default="", help="the deployment's topic prefix")
    add("--quick", action="store_true", help="5,000 entries, 20 s of steady stores")
    add("--entries", type=int, default=100_000, help="entries stored by the population")
    add("--concurrency", type=int, default=16, help="callers of the population")
    add("--queries", type=int, default=500, help="recall queries per measurement")
    add("--rate", type=float, default=100.0, help="steady stores/s (a cap)")
    add("--max-inflight", type=int, default=64, help="steady stores in flight at most")
    add("--duration", type=float, default=60.0, help="seconds of steady stores")
    add("--ramp", type=float, default=10.0, help="seconds left out of the lag trend")
    add("--probe-every", type=float, default=0.5, help="seconds between probes")
    add("--poll-ms", type=float, default=20.0, help="recall poll interval of a probe")
    add("--drain", type=float, default=900.0, help="longest wait for the projection after the stores")
    add("--keep", action="store_true", help="keep the temp directory")
    add("--work", type=Path, default=None, help="run `memstream up` in DIR (kept), e.g. a kept one")
    add("--reuse", default=None, metavar="RUN", help="skip 1: recall the agents of run RUN (module doc)")
    args = parser.parse_args()
    if args.url and (args.key_file is None or args.bootstrap is None):
        parser.error("--url needs --key-file and --bootstrap")
    if args.reuse and not (args.url or args.work):
        parser.error("--reuse needs --work or --url (the node holding run RUN's entries)")
    if args.quick:
        args.entries, args.duration, args.ramp = 5_000, 20.0, 5.0
    args.run = uuid.uuid4().hex[:6]
    work = args.work or Path(tempfile.mkdtemp(prefix="memstream-bench-memhttp-", dir="/tmp"))
    with server_group(work, keep=args.keep or args.work is not None) as group:
        node = node_for(args, group, work)
        projection_runs(node.url)
        meters = Meters(memstream_processes(node, work, servers=True))
        metered = ", ".join(meters.meters) or "no local process"
        print(f"run {args.run} in {work}; metering {metered} and this bench")
        asyncio.run(bench(node, args, meters))


if __name__ == "__main__":
    main()
