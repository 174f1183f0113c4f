"""Throughput of the whole node over HTTP, next to raw SlateDB (issue 11; prints figures, not a test).

    .venv/bin/python bench/bench_http.py                      # embedded node, 3 rounds (~6 min)
    .venv/bin/python bench/bench_http.py --repeat 1 --duration 5          # quicker
    .venv/bin/python bench/bench_http.py --url http://127.0.0.1:8080 --key-file .memstream/api-key
    .venv/bin/python bench/bench_http.py --profile /tmp/node.json  # then py-spy at 64 connections

Without `--url` it starts `memstream up` (Tansu, PostgreSQL, Redis and one node process with the
API, journal writer, relays and every processor) on free ports in a temp directory and stops it
at the end; with `--url` it drives a node already running (`--node-pid` lets it read the node's
CPU). The load comes from `wrk` (C, epoll: not the bottleneck; its own CPU is printed), found on
PATH or given with `--wrk` (`--install-wrk`: `apt-get install -y wrk` when missing), running
Lua scripts generated into the work directory (bench/wrk_load.py).

Workload as issue 11 states it: 100 threads of one agent (10 users), 500-byte user messages with
fresh `message_id`s. After a warm-up of appends, each round (`--repeat`, default 3) measures,
`--duration` s each, every measurement starting once the node is quiet again (its CPU below
`--quiet` of a core: the processors drained the previous appends; `--settle` s at most):
- raw SlateDB in this process (bench_journal.raw_batches: WriteBatch of 64 x 500 B, each
  `await_durable`d, one writer, the journal's settings), with the node idle;
- appends of 1 message per call at 1, 16 and 64 connections and of 100 messages per call at 8:
  calls/s and messages/s, p50 and p99 per call (wrk's), the node's CPU (its process tree) and
  CPU per message, and the ratio messages/s / raw messages/s;
- `GET /v1/threads/{id}/context` of random threads at 1 and 16 connections;
- append -> found: `--probes` sequential appends of a message with a unique word to a thread of
  its own, each followed by `journal_message_search` (scope `current_thread`) every `--poll-ms`
  until it finds the word; time from the append's acknowledgement (so up to one poll late).
The table printed at the end holds the medians of the rounds, figure by figure.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
from bench_journal import message_text, raw_batches
from embedded_node import CpuMeter, Node, start_up, wait_ready
from figures import load_note, pct
from server_group import server_group
from wrk_load import WrkResult, append_script, context_script, find_wrk, run_wrk, wrk_version

AGENT, THREADS, SIZE = "bench-agent", 100, 500
PROBE_THREAD = "probe"


@dataclass(frozen=True)
class Row:
    """One row of the table: a wrk workload (`per_call` 0 = GET /context) and its goal."""

    label: str
    connections: int
    per_call: int
    goal: str


ROWS = [
    Row("append, 1 message per call, 1 connection", 1, 1, ""),
    Row("append, 1 message per call, 16 connections", 16, 1, ""),
    Row("append, 1 message per call, 64 connections", 64, 1, ">= 2,000/s, p99 <= 50 ms"),
    Row("append, 100 messages per call, 8 concurrent", 8, 100, ">= 0.8x raw"),
    Row("GET /context, 1 connection", 1, 0, "p50 <= 2 ms"),
    Row("GET /context, 16 connections", 16, 0, ">= 2,000/s, p99 <= 20 ms"),
]


@dataclass(frozen=True)
class Figures:
    """One row measured once."""

    per_second: float  # messages/s for appends, contexts/s for reads
    p50_ms: float
    p99_ms: float
    node_cpu: float | None  # share of one core
    cpu_ms_per_item: float | None
    client_cpu: float  # wrk's share of one core
    failed: int
    stack_ms: dict[str, float] | None = None
    """Appends: CPU ms per message of each supervised process from the run's start until the
    processors drained it (idle use subtracted); None without the processes' pids."""


def measure(node: Node, args: argparse.Namespace, row: Row, scripts: Path) -> Figures:
    if row.per_call:
        content = message_text(0, SIZE)
        script = append_script(scripts, node.key, AGENT, THREADS, row.per_call, content)
    else:
        script = context_script(scripts, node.key, THREADS)
    meter = CpuMeter(*node.pids)
    stack = StackCpu(node) if row.per_call and node.services else None
    meter.start()
    result: WrkResult = run_wrk(args.wrk, node.url, script, row.connections, args.duration)
    cpu = meter.seconds()
    items = result.calls * max(1, row.per_call)
    stack_ms = stack.per_item_until_quiet(node, args, items) if stack else None
    return Figures(
        per_second=items / result.seconds,
        p50_ms=result.p50_ms,
        p99_ms=result.p99_ms,
        node_cpu=None if cpu is None else cpu / result.seconds,
        cpu_ms_per_item=None if cpu is None or not items else cpu * 1e3 / items,
        client_cpu=result.client_cpu_s / result.seconds,
        failed=result.failed,
        stack_ms=stack_ms,
    )


class StackCpu:
    """CPU of every process `memstream up` supervises (each with its children), measured from
    construction: the whole stack's cost of a workload, the processors' catch-up included."""

    def __init__(self, node: Node, idle_sample_s: float = 2.0) -> None:
        self.meters = {name: CpuMeter(pid) for name, pid in node.services}
        for m in self.meters.values():
            m.start()
        time.sleep(idle_sample_s)  # the idle use, subtracted from the workload's
        self.idle = {name: (m.seconds() or 0.0) / idle_sample_s for name, m in self.meters.items()}
        for m in self.meters.values():
            m.start()
        self.started = time.monotonic()

    def per_item_until_quiet(self, node: Node, args: argparse.Namespace, items: int) -> dict[str, float]:
        """Wait until the node and worker are quiet again, then each process's CPU ms per item
        above its idle use (at least 0), and their sum under "total"."""
        quiet(node, args)
        elapsed = time.monotonic() - self.started
        per = {
            name: max(0.0, (m.seconds() or 0.0) - self.idle[name] * elapsed) * 1e3 / max(1, items)
            for name, m in self.meters.items()
        }
        per["total"] = sum(per.values())
        return per


def seed_threads(http: httpx.Client) -> None:
    """Create the bench threads (and the probe's) with one message each."""
    for t in range(THREADS):
        body = {
            "agent_id": AGENT,
            "user_id": f"user-{t % 10}",
            "messages": [{"message_id": f"seed-{uuid.uuid4().hex}", "role": "user", "content": "Hello."}],
        }
        http.post(f"/v1/threads/thread-{t:03d}/messages", json=body).raise_for_status()
    body = {"agent_id": AGENT, "user_id": "user-probe", "messages": [{"role": "user", "content": "Hello."}]}
    http.post(f"/v1/threads/{PROBE_THREAD}/messages", json=body).raise_for_status()


def probe(http: httpx.Client, thread: str, word: str, poll_s: float, timeout_s: float = 60.0) -> float | None:
    """Append a message holding `word` to `thread`, then poll `journal_message_search` (scope
    `current_thread`) every `poll_s` until it finds it: seconds from the append's acknowledgement,
    or None when not found within `timeout_s`."""
    body = {"messages": [{"role": "user", "content": f"Is the lighthouse {word} open on Saturday?"}]}
    http.post(f"/v1/threads/{thread}/messages", json=body).raise_for_status()
    acked = time.perf_counter()
    call = {"arguments": {"query": word, "scope": "current_thread", "summarize": False}, "thread_id": thread}
    while True:
        response = http.post(f"/v1/agents/{AGENT}/tools/journal_message_search", json=call)
        response.raise_for_status()
        if response.json()["result"]["messages"]:
            return time.perf_counter() - acked
        if time.perf_counter() - acked > timeout_s:
            return None
        time.sleep(poll_s)


def search_probes(http: httpx.Client, probes: int, poll_s: float, timeout_s: float = 60.0) -> list[float]:
    """Seconds from an append's acknowledgement to `journal_message_search` finding it, per probe."""
    run = uuid.uuid4().hex[:8]
    delays: list[float] = []
    for i in range(probes):
        word = f"zq{run}n{i}"
        found = probe(http, PROBE_THREAD, word, poll_s, timeout_s)
        if found is None:
            raise RuntimeError(f"probe {word!r} not found by journal_message_search in {timeout_s:.0f} s")
        delays.append(found)
    return delays


def quiet(node: Node, args: argparse.Namespace) -> float | None:
    """Wait until the node's CPU is below `--quiet` of a core (at most `--settle` s; 5 s without
    a pid); its last 1 s share of a core. Says so when it never got that quiet."""
    share = CpuMeter(*node.pids).wait_quiet(args.quiet, args.settle)
    if share is not None and share >= args.quiet:
        print(f"   (node still at {share:.0%} CPU after {args.settle:.0f} s: measuring anyway)", flush=True)
    return share


def profile(node: Node, args: argparse.Namespace, row: Row, scripts: Path) -> None:
    """Measure `row` once more (not in the table) with py-spy recording the node into `--profile`."""
    pid = node.worker_pid if args.profile_worker else node.pid
    if pid is None:
        print("--profile needs the node's pid (--node-pid with --url) or a worker: no profile", flush=True)
        return
    beside = Path(sys.executable).with_name("py-spy")
    spy = str(beside) if beside.is_file() else shutil.which("py-spy")
    if spy is None:
        print("--profile: py-spy is not installed (`pip install py-spy`): no profile", flush=True)
        return
    fmt = "raw" if args.profile.suffix == ".txt" else "speedscope"
    seconds = str(max(1, round(args.duration - 1)))
    argv = [spy, "record", "--nonblocking", "-p", str(pid), "-d", seconds, "-f", fmt]
    argv += ["-o", str(args.profile)]  # --nonblocking: sampling does not pause the node
    print(f"\n== {row.label}, under py-spy ({' '.join(argv)})", flush=True)
    quiet(node, args)
    with subprocess.Popen(argv, stdout=subprocess.DEVNULL) as spying:
        figs = measure(node, args, row, scripts)
        spying.wait()
    print(
        f"   {figs.per_second:,.0f}/s, p50 {figs.p50_ms:.1f} ms, p99 {figs.p99_ms:.1f} ms; profile in "
        f"{args.profile} (exit {spying.returncode})",
        flush=True,
    )


def fmt_rate(v: float) -> str:
    return f"{v:,.0f}"


def med(values: list[float | None]) -> float | None:
    """The median of the known values (None when none is known)."""
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def report(rows: list[Row], runs: dict[str, list[Figures]], raw: list[float], probes: list[float]) -> None:
    raw_rate = statistics.median(raw)
    print(f"\n== medians of {len(raw)} round(s) ({load_note()})")
    print("| path | per second | p50 | p99 | x raw | node CPU | CPU per item | wrk CPU | goal |")
    print("|---|---|---|---|---|---|---|---|---|")
    print(
        f"| raw SlateDB `WriteBatch` of 64 x 500 B, `await_durable` | {fmt_rate(raw_rate)} msg/s "
        f"| | | 1 | | | | |"
    )
    for row in rows:
        figs = runs[row.label]
        rate = statistics.median(f.per_second for f in figs)
        unit = "msg/s" if row.per_call else "/s"
        ratio = f"{rate / raw_rate:.3f}" if row.per_call else "-"
        cpu, per = med([f.node_cpu for f in figs]), med([f.cpu_ms_per_item for f in figs])
        failed = sum(f.failed for f in figs)
        note = f" ({failed} failed calls)" if failed else ""
        p50, p99 = statistics.median(f.p50_ms for f in figs), statistics.median(f.p99_ms for f in figs)
        print(
            f"| {row.label} | {fmt_rate(rate)} {unit}{note} | {p50:.1f} ms | {p99:.1f} ms | {ratio} "
            f"| {'-' if cpu is None else f'{cpu:.0%}'} | {'-' if per is None else f'{per:.2f} ms'} "
            f"| {statistics.median(f.client_cpu for f in figs):.0%} | {row.goal} |"
        )
    ms = [d * 1000 for d in probes]
    print(
        f"| append -> found by `journal_message_search` ({len(ms)} probes) | | {pct(ms, 0.5):.0f} ms "
        f"| p95 {pct(ms, 0.95):.0f} ms | | | | | p95 <= 1 s (under load) |"
    )
    print(
        "x raw = messages/s over raw SlateDB's msg/s of the same round; node CPU = the node process "
        "tree's CPU (1.0 = one core); CPU per item = per message (appends) or per context (reads)."
    )


def report_stack(rows: list[Row], runs: dict[str, list[Figures]], raw_cpu: list[float]) -> None:
    """CPU per appended message of each process, until drained, and the cores a goal rate needs."""
    measured = [r for r in rows if r.per_call and any(f.stack_ms for f in runs[r.label])]
    if not measured:
        return
    names = [n for n in (runs[measured[0].label][0].stack_ms or {}) if n != "total"]
    cores = psutil.cpu_count() or 1
    print("\n== CPU per appended message, whole stack, from the run's start until drained (us; medians)")
    print(f"| path | {' | '.join(names)} | total | msg/s on {cores} cores at that cost |")
    print("|---|" + "---|" * (len(names) + 2))
    for row in measured:
        cells = {n: med([(f.stack_ms or {}).get(n) for f in runs[row.label]]) for n in [*names, "total"]}
        total = cells["total"] or 0.0
        bound = f"{cores * 1e3 / total:,.0f}" if total else "-"
        shown = " | ".join("-" if cells[n] is None else f"{(cells[n] or 0.0) * 1e3:.0f}" for n in names)
        print(f"| {row.label} | {shown} | {total * 1e3:.0f} | {bound} |")
    if raw_cpu:
        raw_us = statistics.median(raw_cpu) * 1e3
        print(
            f"raw SlateDB `WriteBatch` of 64 x 500 B: {raw_us:.0f} us of CPU per message (this process), "
            f"{cores * 1e6 / raw_us:,.0f} msg/s on {cores} cores at that cost"
        )
    print(
        "Each process's CPU above its idle use, divided by the messages appended; the last column is "
        "the rate at which that cost would fill every core of this machine (an upper bound)."
    )


def bench(node: Node, args: argparse.Namespace, work: Path) -> None:
    scripts = work / "wrk"
    scripts.mkdir(parents=True, exist_ok=True)
    headers = {"Authorization": f"Bearer {node.key}"}
    runs: dict[str, list[Figures]] = {row.label: [] for row in ROWS}
    raw: list[float] = []
    raw_cpu: list[float] = []  # ms of this process's CPU per raw message
    probes: list[float] = []
    with httpx.Client(base_url=node.url, headers=headers, timeout=60) as http:
        seed_threads(http)
        print(
            f"seeded {THREADS} threads; warm-up: {args.warmup:.0f} s of appends at 16 connections", flush=True
        )
        warm = append_script(scripts, node.key, AGENT, THREADS, 1, message_text(0, SIZE))
        run_wrk(args.wrk, node.url, warm, 16, args.warmup)
        for round_no in range(1, args.repeat + 1):
            print(f"\n== round {round_no}/{args.repeat} ({load_note()})", flush=True)
            idle = quiet(node, args)
            if idle is not None:
                print(f"   node idle: {idle:.0%} CPU", flush=True)
            cpu_before = time.process_time()
            raw.append(asyncio.run(raw_batches(work / "raw", args.raw_seconds)))
            raw_cpu.append((time.process_time() - cpu_before) * 1e3 / (raw[-1] * args.raw_seconds))
            print(
                f"   raw SlateDB WriteBatch 64 x 500 B, await_durable: {raw[-1]:,.0f} msg/s, "
                f"{raw_cpu[-1] * 1e3:.0f} us of CPU per message",
                flush=True,
            )
            for row in ROWS:
                quiet(node, args)  # the processors drained the previous row's appends
                figs = measure(node, args, row, scripts)
                runs[row.label].append(figs)
                cpu = "" if figs.node_cpu is None else f", node CPU {figs.node_cpu:.0%}"
                failed = f", {figs.failed} FAILED" if figs.failed else ""
                print(
                    f"   {row.label:<46} {figs.per_second:>8,.0f}/s  p50 {figs.p50_ms:7.1f} ms  "
                    f"p99 {figs.p99_ms:7.1f} ms{cpu}, wrk CPU {figs.client_cpu:.0%}{failed}",
                    flush=True,
                )
            quiet(node, args)
            found = search_probes(http, args.probes, args.poll_ms / 1000)
            probes.extend(found)
            ms = [d * 1000 for d in found]
            print(f"   append -> found by journal_message_search: p50 {pct(ms, 0.5):.0f} ms", flush=True)
    report(ROWS, runs, raw, probes)
    report_stack(ROWS, runs, raw_cpu)
    if args.profile:
        profile(node, args, ROWS[2], scripts)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", default=None, help="a running node (default: start `memstream up`)")
    parser.add_argument("--key-file", type=Path, default=None, help="API key file (with --url)")
    parser.add_argument("--node-pid", type=int, default=None, help="the node's pid (with --url; for CPU)")
    parser.add_argument("--repeat", type=int, default=3, help="rounds; the table shows their medians")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per wrk run")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds of appends before round 1")
    parser.add_argument("--quiet", type=float, default=0.35, help="node CPU share that counts as idle")
    parser.add_argument("--settle", type=float, default=60.0, help="at most this long waiting for quiet")
    parser.add_argument("--raw-seconds", type=float, default=5.0, help="seconds of raw SlateDB writes")
    parser.add_argument("--probes", type=int, default=20, help="append -> search probes per round")
    parser.add_argument("--poll-ms", type=float, default=20.0, help="search poll interval of a probe")
    parser.add_argument("--wrk", default=None, help="the wrk binary (default: wrk on PATH)")
    parser.add_argument("--install-wrk", action="store_true", help="apt-get install wrk when missing")
    parser.add_argument("--profile", type=Path, default=None, help="py-spy output (.txt: raw format)")
    parser.add_argument(
        "--profile-worker", action="store_true", help="record the thread-memory worker, not the node"
    )
    parser.add_argument("--keep", action="store_true", help="keep the temp directory")
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    if args.url and args.key_file is None:
        parser.error("--url needs --key-file")
    args.wrk = find_wrk(args.wrk, args.install_wrk)
    print(f"load generator: {wrk_version(args.wrk)} ({args.wrk}), Lua scripts from bench/wrk_load.py")

    work = Path(tempfile.mkdtemp(prefix="memstream-bench-http-", dir="/tmp"))
    with server_group(work, keep=args.keep) as group:
        if args.url:
            wait_ready(args.url)
            node = Node(url=args.url, key=args.key_file.read_text().strip(), pid=args.node_pid)
        else:
            started = time.monotonic()
            print(f"starting `memstream up` in {work} ({load_note()})", flush=True)
            node = start_up(group, work)
            print(
                f"node ready (every processor running) in {time.monotonic() - started:.0f} s: "
                f"{node.url}, pid {node.pid}",
                flush=True,
            )
        bench(node, args, work)


if __name__ == "__main__":
    main()
