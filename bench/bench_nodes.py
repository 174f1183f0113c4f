"""Appends over HTTP through 1, 2 and 3 node processes sharing the journal shards (issue 15; prints
figures, not a test).

    .venv/bin/python bench/bench_nodes.py                       # 1, 2, 3 nodes, 6 shards (~4 min)
    .venv/bin/python bench/bench_nodes.py --duration 5 --nodes 1,2

One stack in a temp directory: `memstream up` (Tansu, PostgreSQL, Redis, node 1 with the
embedded projections, its thread-memory worker) with `MEMSTREAM_MEMBERSHIP=true` and
`--shards` journal shards; then node 2 and node 3 are started as `memstream node` processes of the
same deployment (their own data dir and port; the shared journal and object store directories).
For each node count, once the shards are spread evenly (leases in Postgres) and the stack is quiet:
`--connections` connections in all, split evenly over the live nodes (one wrk per node, 1 message of
500 bytes per call, 100 threads: most calls reach a node that forwards them to the thread's owner),
for `--duration` s. With several nodes this is measured twice (`--routing`): `forwarded`, each
node's calls spread over every thread, so (n-1)/n of them are forwarded to the thread's owner (a
client that knows nothing of the shards), and `owner`, each node's calls only to the threads of
the shards it holds (a client routing by the shard map: `shard_of` and the leases), so nothing is
forwarded. Printed: messages/s in all, its ratio to 1 node, p50/p99 per call (the worst node's),
failed calls, and each process's CPU during the run in cores (the nodes, the worker, the broker,
PostgreSQL, Redis, wrk). On a 2-core machine every process shares the same two cores: the gain is
bounded by them (see README Benchmarks).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import asyncpg
from bench_journal import message_text
from embedded_node import CpuMeter, ready
from figures import load_note
from server_group import ServerGroup, server_group
from wrk_load import WrkResult, append_script, find_wrk, run_wrk

from core.sharding.shards import shard_of
from memstream.embedded.process import ManagedProcess, free_port

AGENT, THREADS, SIZE = "bench-agent", 100, 500
ENVIRONMENT, ACCOUNT = "dev", "default"  # the first key `memstream up` creates
TOKEN = "bench-nodes-admin-token"


class Stack:
    """`memstream up` with membership on (node 1), and the nodes added to it."""

    def __init__(self, group: ServerGroup, work: Path, shards: int) -> None:
        self.group, self.work, self.shards = group, work, shards
        self.data = work / "data"
        self.ports = {"broker": free_port(), "postgres": free_port(), "redis": free_port()}
        self.base = {
            **os.environ,
            "MEMSTREAM_PORTS__BROKER": str(self.ports["broker"]),
            "MEMSTREAM_PORTS__POSTGRES": str(self.ports["postgres"]),
            "MEMSTREAM_PORTS__REDIS": str(self.ports["redis"]),
            "MEMSTREAM_MEMBERSHIP": "true",
            "MEMSTREAM_ADMIN_TOKEN": TOKEN,
            "MEMSTREAM_JOURNAL_SHARDS": str(shards),
            "MEMSTREAM_JOURNAL_URL": f"file://{self.data / 'journal'}",
            "MEMSTREAM_OBJECT_STORE_URL": f"file://{self.data / 'objects'}",
            "MEMSTREAM_ACCESS_LOG": "false",
            "PYTHONUNBUFFERED": "1",
        }
        self.base.pop("MEMSTREAM_CONFIG", None)
        self.urls: list[str] = []
        self.pids: dict[str, int] = {}

    def up(self) -> None:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        env = {
            **self.base,
            "MEMSTREAM_DATA_DIR": str(self.data),
            "MEMSTREAM_API_PORT": str(port),
            "MEMSTREAM_NODE_NAME": "node-1",
            "MEMSTREAM_PROJECTIONS_NODE": "true",
        }
        state = self.data / "run" / "state.json"

        def stack_ready() -> bool:
            return state.is_file() and ready(url) and "worker" in json.loads(state.read_text())["services"]

        up = ManagedProcess(
            name="memstream-up",
            argv=[sys.executable, "-m", "memstream", "up"],
            log_path=self.work / "up.log",
            ready=stack_ready,
            env=env,
            cwd=self.work,
        )
        self.group.start(up, timeout=300)
        services = json.loads(state.read_text())["services"]
        self.pids = {
            ("node-1" if name == "node" else name): int(svc["pid"]) for name, svc in services.items()
        }
        self.urls.append(url)

    @property
    def key(self) -> str:
        return (self.data / "api-key").read_text().strip()

    def add_node(self) -> None:
        n = len(self.urls) + 1
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        env = {
            **self.base,
            "MEMSTREAM_DATA_DIR": str(self.work / f"node-{n}"),
            "MEMSTREAM_API_PORT": str(port),
            "MEMSTREAM_SQL__PORT": str(free_port()),
            "MEMSTREAM_NODE_NAME": f"node-{n}",
        }
        node = ManagedProcess(
            name=f"node-{n}",
            argv=[sys.executable, "-m", "memstream", "node"],
            log_path=self.work / f"node-{n}.log",
            ready=lambda: ready(url),
            env=env,
            cwd=self.work,
        )
        self.group.start(node, timeout=180)
        assert node.pid is not None
        self.pids[f"node-{n}"] = node.pid
        self.urls.append(url)

    def leases(self) -> dict[str, list[int]]:
        """The shards each live node holds, by the URL it advertises."""
        dsn = f"postgresql://postgres@127.0.0.1:{self.ports['postgres']}/memstream"

        async def read() -> dict[str, list[int]]:
            conn = await asyncpg.connect(dsn)
            try:
                rows = await conn.fetch(
                    "SELECT node_url, shard FROM shard_leases WHERE environment = $1"
                    " AND node_id IS NOT NULL AND expires_at > now() ORDER BY shard",
                    ENVIRONMENT,
                )
            finally:
                await conn.close()
            held: dict[str, list[int]] = {}
            for row in rows:
                held.setdefault(row["node_url"].rstrip("/"), []).append(int(row["shard"]))
            return held

        return asyncio.run(read())

    def wait_spread(self, timeout_s: float = 60) -> None:
        """Until every shard is leased and each live node holds shards / nodes (rounded)."""
        nodes, deadline = len(self.urls), time.monotonic() + timeout_s
        while True:
            counts = sorted(len(shards) for shards in self.leases().values())
            if len(counts) == nodes and sum(counts) == self.shards and counts[-1] - counts[0] <= 1:
                return
            if time.monotonic() > deadline:
                raise SystemExit(f"the shards were not spread over {nodes} nodes: {counts}")
            time.sleep(0.5)


def owned_threads(stack: Stack) -> dict[str, list[int]]:
    """The bench threads of each live node's shards, by node URL (owner routing: module doc)."""
    held = stack.leases()
    owner = {shard: url for url, shards in held.items() for shard in shards}
    threads: dict[str, list[int]] = {url: [] for url in stack.urls}
    for t in range(THREADS):
        url = owner.get(shard_of(ENVIRONMENT, ACCOUNT, f"thread-{t:03d}", stack.shards))
        if url not in threads:
            raise SystemExit(f"the leases name no live node for thread-{t:03d}: {held} (nodes {stack.urls})")
        threads[url].append(t)
    return threads


def measure(
    stack: Stack, wrk: str, scripts: Path, connections: int, duration_s: float, routing: str
) -> tuple[list[WrkResult], dict[str, float]]:
    """One run: a wrk per live node, all at once; each process's CPU in cores during it."""
    content = message_text(0, SIZE)
    owned = owned_threads(stack) if routing == "owner" else None
    scripts_by_url = {
        url: append_script(scripts, stack.key, AGENT, THREADS, 1, content, only=owned[url] if owned else None)
        for url in stack.urls
        if owned is None or owned[url]
    }
    per_node = max(1, connections // len(scripts_by_url))
    meters = {name: CpuMeter(pid) for name, pid in stack.pids.items()}
    for meter in meters.values():
        meter.start()
    started = time.monotonic()
    with ThreadPoolExecutor(len(scripts_by_url)) as pool:
        runs = list(
            pool.map(lambda url: run_wrk(wrk, url, scripts_by_url[url], per_node, duration_s), scripts_by_url)
        )
    elapsed = time.monotonic() - started
    cpu = {name: (meter.seconds() or 0.0) / elapsed for name, meter in meters.items()}
    cpu["wrk"] = sum(run.client_cpu_s for run in runs) / elapsed
    return runs, cpu


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", default="1,2,3", help="node counts to measure, ascending (default 1,2,3)")
    parser.add_argument("--shards", type=int, default=6, help="journal shards (default 6)")
    parser.add_argument("--connections", type=int, default=48, help="connections in all (default 48)")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per run (default 10)")
    parser.add_argument(
        "--routing",
        default="forwarded,owner",
        help="with several nodes: forwarded, owner or both (default forwarded,owner; module doc)",
    )
    parser.add_argument("--settle", type=float, default=60.0, help="longest wait for a quiet stack (s)")
    parser.add_argument("--wrk", default=None, help="the wrk binary (default: wrk on PATH)")
    parser.add_argument("--install-wrk", action="store_true", help="apt-get install wrk when missing")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()
    counts = [int(n) for n in args.nodes.split(",")]
    if counts != sorted(counts) or counts[0] < 1 or counts[-1] > args.shards:
        parser.error("--nodes: ascending counts from 1 to --shards")
    routings = args.routing.split(",")
    if not routings or not set(routings) <= {"forwarded", "owner"}:
        parser.error("--routing: forwarded, owner or forwarded,owner")
    wrk = find_wrk(args.wrk, args.install_wrk)
    work = Path(tempfile.mkdtemp(prefix="bench-nodes-"))
    scripts = work / "scripts"
    scripts.mkdir()
    print(f"{load_note()}; work directory {work}", flush=True)
    rows: list[tuple[str, float, float, float, int, dict[str, float]]] = []
    with server_group(work, keep=args.keep) as group:
        stack = Stack(group, work, args.shards)
        stack.up()
        warm = append_script(scripts, stack.key, AGENT, THREADS, 1, message_text(0, SIZE))
        run_wrk(wrk, stack.urls[0], warm, 16, 5)  # creates the threads, warms every path
        for n in counts:
            while len(stack.urls) < n:
                stack.add_node()
            stack.wait_spread()
            everything = CpuMeter(*stack.pids.values())
            share = everything.wait_quiet(below=0.3, max_s=args.settle)
            print(f"{n} node(s): shards spread, stack quiet ({share or 0:.2f} cores); measuring", flush=True)
            for i, routing in enumerate(routings if n > 1 else ["owner"]):
                if i:  # the previous run's backlog (projections, summaries) drained first
                    everything.wait_quiet(below=0.3, max_s=args.settle)
                runs, cpu = measure(stack, wrk, scripts, args.connections, args.duration, routing)
                rate = sum(run.per_second for run in runs)
                failed = sum(run.failed for run in runs)
                label = f"{n}" if n == 1 else f"{n}, {routing}"
                p50, p99 = max(r.p50_ms for r in runs), max(r.p99_ms for r in runs)
                print(f"  {label}: {rate:,.0f} msg/s", flush=True)
                rows.append((label, rate, p50, p99, failed, cpu))
    base = rows[0][1]
    print()
    print("| nodes, routing | msg/s | vs 1 node | p50 ms | p99 ms | failed | CPU (cores) during the run |")
    print("|---|---|---|---|---|---|---|")
    for label, rate, p50, p99, failed, cpu in rows:
        shown = ", ".join(f"{name} {share:.2f}" for name, share in cpu.items())
        total = sum(cpu.values())
        figures = f"{rate:,.0f} | {rate / base:.2f}x | {p50:.1f} | {p99:.1f} | {failed}"
        print(f"| {label} | {figures} | {shown}; all {total:.2f} |")


if __name__ == "__main__":
    main()
