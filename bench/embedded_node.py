"""The node bench_http drives: an embedded stack started with `memstream up`, or one already running.

`start_up` runs `memstream up` (Tansu, PostgreSQL, Redis, then the node with its API, journal
writer, relays and projections, and the worker with the thread-memory processors) as a child
process on free ports in a work directory, as a user meets it, and waits until `/readyz` says
`ready` (every processor of the node runs) and the worker was started. The stack is stopped by
the `server_group` it was started in (SIGTERM: `up` stops the node and its servers in order).

`CpuMeter` measures the CPU time a process and its descendants used between two readings, to
tell the node's CPU per call, and waits until the node is quiet again between measurements.

The benches run as scripts (`.venv/bin/python bench/bench_x.py`), so this module is imported as
`embedded_node` from the bench directory.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
from figures import load_note
from server_group import ServerGroup

from memstream.embedded.process import ManagedProcess, free_port


@dataclass(frozen=True)
class Node:
    """A node to drive: its API's base URL, an API key, its process id when it is local, and its
    broker's bootstrap address when known."""

    url: str
    key: str
    pid: int | None
    bootstrap: str | None = None
    worker_pid: int | None = None
    """The thread-memory worker `memstream up` runs beside the node (None: the node hosts them)."""
    services: tuple[tuple[str, int], ...] = ()
    """Every process `memstream up` supervises, by name (broker, postgres, redis, node, worker);
    empty for a node started elsewhere."""

    @property
    def pids(self) -> list[int]:
        """The memstream processes serving this node: the node, and its worker when there is one."""
        return [pid for pid in (self.pid, self.worker_pid) if pid is not None]


def ready(url: str) -> bool:
    """True once `/readyz` answers 200 with status `ready` (not `degraded`: every processor runs)."""
    try:
        response = httpx.get(f"{url}/readyz", timeout=2.0)
        return response.status_code == 200 and response.json().get("status") == "ready"
    except (httpx.HTTPError, ValueError):
        return False


def start_up(group: ServerGroup, work: Path, timeout_s: float = 300.0) -> Node:
    """Start `memstream up` on free ports with its data in `work/data`; the running node."""
    data, api_port, broker_port = work / "data", free_port(), free_port()
    env = {
        **os.environ,
        "MEMSTREAM_DATA_DIR": str(data),
        "MEMSTREAM_API_PORT": str(api_port),
        "MEMSTREAM_PORTS__BROKER": str(broker_port),
        "MEMSTREAM_PORTS__POSTGRES": str(free_port()),
        "MEMSTREAM_PORTS__REDIS": str(free_port()),
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("MEMSTREAM_CONFIG", None)
    url = f"http://127.0.0.1:{api_port}"
    # `up` runs the thread-memory processors in a worker unless the node is told to host them
    worker_wanted = "MEMSTREAM_NODE_PROCESSORS" not in env

    def stack_ready() -> bool:
        state = data / "run" / "state.json"  # the node's (and worker's) pid
        if not state.is_file() or not ready(url):
            return False
        return not worker_wanted or "worker" in json.loads(state.read_text())["services"]

    up = ManagedProcess(
        name="memstream-up",
        argv=[sys.executable, "-m", "memstream", "up"],
        log_path=work / "up.log",
        ready=stack_ready,
        env=env,
        cwd=work,  # no memstream.toml of the current directory
    )
    group.start(up, timeout=timeout_s)
    key = (data / "api-key").read_text().strip()
    state = json.loads((data / "run" / "state.json").read_text())
    worker = state["services"].get("worker")
    return Node(
        url=url,
        key=key,
        pid=int(state["services"]["node"]["pid"]),
        bootstrap=f"127.0.0.1:{broker_port}",
        worker_pid=int(worker["pid"]) if worker else None,
        services=tuple((name, int(svc["pid"])) for name, svc in state["services"].items()),
    )


def wait_ready(url: str, timeout_s: float = 120.0) -> None:
    """Wait until a running node at `url` is ready with every processor running."""
    deadline = time.monotonic() + timeout_s
    while not ready(url):
        if time.monotonic() > deadline:
            raise SystemExit(f"{url}/readyz did not answer status ready within {timeout_s:.0f} s")
        time.sleep(0.5)


class CpuMeter:
    """CPU seconds used by processes and their descendants (those alive at the reading) since
    `start()`; no readings without a pid."""

    def __init__(self, *pids: int | None) -> None:
        self.processes = [psutil.Process(pid) for pid in pids if pid is not None]
        self.process = self.processes[0] if self.processes else None
        self.started = 0.0

    def _total(self) -> float:
        total = 0.0
        tree = [p for root in self.processes for p in (root, *root.children(recursive=True))]
        for proc in tree:
            try:
                times = proc.cpu_times()
            except psutil.NoSuchProcess:
                continue
            total += times.user + times.system + times.children_user + times.children_system
        return total

    def start(self) -> None:
        self.started = self._total()

    def seconds(self) -> float | None:
        """CPU seconds since `start()` (None without a process to read)."""
        return None if self.process is None else self._total() - self.started

    def wait_quiet(self, below: float, max_s: float) -> float | None:
        """Sleep in 1 s steps until the process tree used less than `below` of a core in the last
        step (its processors drained what was appended), `max_s` at most; the last step's share.
        Without a process to read: a plain 5 s pause (None)."""
        if self.process is None:
            time.sleep(min(max_s, 5.0))
            return None
        deadline = time.monotonic() + max_s
        while True:
            self.start()
            time.sleep(1.0)
            share = self.seconds() or 0.0
            if share < below or time.monotonic() >= deadline:
                return share


def node_for(args: argparse.Namespace, group: ServerGroup, work: Path) -> Node:
    """The node a bench drives: the running one at `args.url` (its key from `args.key_file`), or
    `memstream up` started in `work` (then `args.bootstrap` becomes its broker)."""
    if args.url:
        wait_ready(args.url)
        return Node(url=args.url, key=args.key_file.read_text().strip(), pid=None)
    print(f"starting `memstream up` in {work} ({load_note()})", flush=True)
    node = start_up(group, work)
    args.bootstrap = node.bootstrap
    print(f"node ready: {node.url}, pid {node.pid}, broker {args.bootstrap}", flush=True)
    return node
