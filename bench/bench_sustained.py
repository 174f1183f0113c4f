"""Sustained appends on the whole node: do the processors keep up? (issue 11; prints figures, not a test).

    .venv/bin/python bench/bench_sustained.py                      # embedded node, 5 min at <= 2,000/s
    .venv/bin/python bench/bench_sustained.py --rate 500 --duration 60            # quicker
    .venv/bin/python bench/bench_sustained.py --url http://127.0.0.1:8080 --key-file .memstream/api-key \\
        --bootstrap 127.0.0.1:9092

Without `--url` it starts `memstream up` (every processor running) in a temp directory, as
bench_http does. Then, for `--duration` s, `wrk` appends single 500-byte messages to 100 threads
from `--connections` connections, each pausing so that together they send at most `--rate`
calls/s (wrk's `delay()` hook: a cap, the achieved rate is printed). Meanwhile:
- a probe appends a message with a unique word to a thread of its own every `--probe-every` s
  and polls `journal_message_search` (scope `current_thread`) every `--poll-ms` until it finds it:
  append acknowledged -> searchable, under load;
- every `--sample-every` s, each processor's consumer lag (committed offsets of its group
  `memstream.<name>` against the ends of its source topics, read from the broker) and the CPU of
  the memstream processes (the node, and a worker when `memstream up` runs one);
- before and after, every bench thread's summary version (`GET /context` metadata): summaries
  must still be written under load.
After the load it waits (`--drain` s at most) until every lag is 0: the catch-up time.

Lag is "bounded" when the least-squares slope of a processor's lag over the run (after the first
`--ramp` s) is below 1% of the append rate: a backlog that grows by less than that per second.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from bench_http import AGENT, SIZE, THREADS, probe, seed_threads
from bench_journal import message_text
from embedded_node import CpuMeter, Node, node_for
from figures import load_note, pct
from server_group import server_group
from wrk_load import WrkResult, append_script, find_wrk, run_wrk, wrk_version

from memstream.ops.replay import GroupOffsets, total_lag
from processors import clickhouse_projection, flush, qdrant_projection, summarizer, thresholds

PROBE_THREAD = "probe-sustained"
SOURCES: Mapping[str, str] = {
    "thresholds": thresholds.SOURCE_TOPIC,
    "flush": flush.SOURCE_TOPIC,
    "summarizer": summarizer.SOURCE_TOPIC,
    "clickhouse-projection": clickhouse_projection.SOURCE_TOPIC,
    "qdrant-projection": qdrant_projection.SOURCE_TOPIC,
}
"""Each processor's source topic (their modules' own constants)."""
SERVERS = frozenset({"broker", "postgres", "redis"})


@dataclass
class Samples:
    """What the run observed: probe delays (s), lag per processor as (elapsed s, messages), CPU
    share per memstream process."""

    probes: list[float] = field(default_factory=list)
    lags: dict[str, list[tuple[float, int]]] = field(default_factory=dict)
    cpu: dict[str, list[float]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


def probe_loop(node: Node, every_s: float, poll_s: float, stop: threading.Event, out: Samples) -> None:
    """Append -> searchable probes until `stop`; a probe not found in 60 s is recorded as an error."""
    headers = {"Authorization": f"Bearer {node.key}"}
    run = uuid.uuid4().hex[:8]
    with httpx.Client(base_url=node.url, headers=headers, timeout=60) as http:
        i = 0
        while not stop.is_set():
            began = time.monotonic()
            word = f"zq{run}s{i}"
            found = probe(http, PROBE_THREAD, word, poll_s)
            if found is None:
                out.errors.append(f"probe {word} not searchable after 60 s")
            else:
                out.probes.append(found)
            i += 1
            stop.wait(max(0.0, every_s - (time.monotonic() - began)))


def lags(offsets: GroupOffsets, prefix: str) -> dict[str, int]:
    """Each processor's total consumer lag now."""
    return {
        name: total_lag(offsets.lag(f"{prefix}memstream.{name}", [prefix + topic]))  # processor.group_id
        for name, topic in SOURCES.items()
    }


def summary_versions(node: Node) -> dict[str, int | None]:
    """Each bench thread's summary version (None: no summary yet)."""
    headers = {"Authorization": f"Bearer {node.key}"}
    versions: dict[str, int | None] = {}
    with httpx.Client(base_url=node.url, headers=headers, timeout=60) as http:
        for t in range(THREADS):
            response = http.get(f"/v1/threads/thread-{t:03d}/context")
            response.raise_for_status()
            versions[f"thread-{t:03d}"] = response.json()["metadata"]["summary_version"]
    return versions


def memstream_processes(node: Node, work: Path, *, servers: bool = False) -> dict[str, int]:
    """The memstream processes to meter: the node and any other non-server service of `memstream
    up` (run/state.json; with `servers`, the broker, PostgreSQL and Redis too), or the node's pid
    alone."""
    state = work / "data" / "run" / "state.json"
    if node.pid is not None and state.is_file():
        services = json.loads(state.read_text())["services"]
        wanted = {name for name in services if servers or name not in SERVERS}
        return {name: int(s["pid"]) for name, s in services.items() if name in wanted and s.get("pid")}
    return {"node": node.pid} if node.pid is not None else {}


def slope(points: list[tuple[float, int]], after_s: float) -> float | None:
    """Least-squares slope (messages/s) of the points after `after_s`; None with fewer than 3."""
    kept = [(t, v) for t, v in points if t >= after_s]
    if len(kept) < 3:
        return None
    return statistics.linear_regression([t for t, _ in kept], [float(v) for _, v in kept]).slope


def run(node: Node, args: argparse.Namespace, work: Path) -> None:
    headers = {"Authorization": f"Bearer {node.key}"}
    with httpx.Client(base_url=node.url, headers=headers, timeout=60) as http:
        seed_threads(http)
        http.post(
            f"/v1/threads/{PROBE_THREAD}/messages",
            json={
                "agent_id": AGENT,
                "user_id": "user-probe",
                "messages": [{"role": "user", "content": "Hi."}],
            },
        ).raise_for_status()
    offsets = GroupOffsets(args.bootstrap)
    before = summary_versions(node)
    meters = {name: CpuMeter(pid) for name, pid in memstream_processes(node, work).items()}
    delay_ms = max(1, round(args.connections * 1000 / args.rate))
    script = append_script(work, node.key, AGENT, THREADS, 1, message_text(0, SIZE), delay_ms=delay_ms)
    print(
        f"load: {args.connections} connections, each pausing {delay_ms} ms per call (<= {args.rate:,}/s), "
        f"{args.duration:.0f} s; metering {', '.join(meters) or 'no process'} ({load_note()})",
        flush=True,
    )
    samples = Samples(lags={name: [] for name in SOURCES}, cpu={name: [] for name in meters})
    stop = threading.Event()
    result: list[WrkResult] = []
    loader = threading.Thread(
        target=lambda: result.append(run_wrk(args.wrk, node.url, script, args.connections, args.duration))
    )
    prober = threading.Thread(
        target=probe_loop, args=(node, args.probe_every, args.poll_ms / 1000, stop, samples)
    )
    began = time.monotonic()
    loader.start()
    prober.start()
    try:
        while loader.is_alive():
            for meter in meters.values():
                meter.start()
            loader.join(args.sample_every)
            elapsed = time.monotonic() - began
            now = lags(offsets, args.topic_prefix)
            for name, value in now.items():
                samples.lags[name].append((elapsed, value))
            for name, meter in meters.items():
                samples.cpu[name].append((meter.seconds() or 0.0) / args.sample_every)
            cpu = ", ".join(f"{n} {s[-1]:.0%}" for n, s in samples.cpu.items())
            print(f"   {elapsed:5.0f} s  lag {now}  CPU {cpu}  probes {len(samples.probes)}", flush=True)
    finally:
        stop.set()
        prober.join()
    load = result[0] if result else None
    drained_at = None
    deadline = time.monotonic() + args.drain
    while time.monotonic() < deadline:
        if not any(lags(offsets, args.topic_prefix).values()):
            drained_at = time.monotonic()
            break
        time.sleep(1.0)
    after = summary_versions(node)
    report(
        args, load, samples, before, after, None if drained_at is None else drained_at - began - args.duration
    )


def report(
    args: argparse.Namespace,
    load: WrkResult | None,
    samples: Samples,
    before: Mapping[str, int | None],
    after: Mapping[str, int | None],
    catch_up_s: float | None,
) -> None:
    print(f"\n== sustained appends ({load_note()})")
    print("| figure | value | goal |")
    print("|---|---|---|")
    if load is not None:
        print(
            f"| appends, 1 message per call, {args.connections} connections (cap {args.rate:,}/s) "
            f"| {load.per_second:,.0f}/s, p50 {load.p50_ms:.1f} ms, p99 {load.p99_ms:.1f} ms, "
            f"{load.failed} failed | |"
        )
        rate = load.per_second
    else:
        rate = float(args.rate)
    ms = [d * 1000 for d in samples.probes]
    if ms:
        print(
            f"| append -> searchable under load ({len(ms)} probes) | p50 {pct(ms, 0.5):.0f} ms, "
            f"p95 {pct(ms, 0.95):.0f} ms, max {max(ms):.0f} ms | p95 <= 1 s |"
        )
    for name, points in samples.lags.items():
        growth = slope(points, args.ramp)
        values = [v for _, v in points]
        verdict = "-" if growth is None else ("bounded" if growth < 0.01 * rate else "GROWING")
        trend = "-" if growth is None else f"{growth:+,.1f} msg/s"
        print(
            f"| lag of {name}: median {statistics.median(values) if values else 0:,.0f}, max "
            f"{max(values, default=0):,}, trend {trend} | {verdict} | no growth |"
        )
    caught = "not within --drain" if catch_up_s is None else f"{catch_up_s:.0f} s"
    print(f"| caught up after the load | {caught} | |")
    advanced = [t for t in after if (after[t] or 0) > (before.get(t) or 0)]
    versions = sum((after[t] or 0) - (before.get(t) or 0) for t in advanced)
    print(
        f"| summaries written during the run | {versions} in {len(advanced)} of {len(after)} threads | > 0 |"
    )
    for name, shares in samples.cpu.items():
        print(
            f"| CPU of {name} (1.0 = one core) | median {statistics.median(shares):.2f} | |" if shares else ""
        )
    for error in samples.errors:
        print(f"ERROR: {error}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", default=None, help="a running node (default: start `memstream up`)")
    parser.add_argument("--key-file", type=Path, default=None, help="API key file (with --url)")
    parser.add_argument("--bootstrap", default=None, help="the broker (with --url)")
    parser.add_argument("--topic-prefix", default="", help="the deployment's topic prefix")
    parser.add_argument("--rate", type=int, default=2000, help="append calls/s at most")
    parser.add_argument("--connections", type=int, default=64, help="wrk connections")
    parser.add_argument("--duration", type=float, default=300.0, help="seconds of load")
    parser.add_argument("--ramp", type=float, default=30.0, help="seconds left out of the lag trend")
    parser.add_argument("--probe-every", type=float, default=1.0, help="seconds between probes")
    parser.add_argument("--poll-ms", type=float, default=20.0, help="search poll interval of a probe")
    parser.add_argument("--sample-every", type=float, default=5.0, help="seconds between lag samples")
    parser.add_argument("--drain", type=float, default=300.0, help="longest wait for lag 0 afterwards")
    parser.add_argument("--wrk", default=None, help="the wrk binary (default: wrk on PATH)")
    parser.add_argument("--install-wrk", action="store_true", help="apt-get install wrk when missing")
    parser.add_argument("--keep", action="store_true", help="keep the temp directory")
    args = parser.parse_args()
    if args.url and (args.key_file is None or args.bootstrap is None):
        parser.error("--url needs --key-file and --bootstrap")
    args.wrk = find_wrk(args.wrk, args.install_wrk)
    print(f"load generator: {wrk_version(args.wrk)} ({args.wrk})")
    work = Path(tempfile.mkdtemp(prefix="memstream-bench-sustained-", dir="/tmp"))
    with server_group(work, keep=args.keep) as group:
        node = node_for(args, group, work)
        run(node, args, work)


if __name__ == "__main__":
    main()
