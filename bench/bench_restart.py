"""Benchmark: restart-to-caught-up time of a node whose memory-only broker lost everything (prints figures).

    .venv/bin/python bench/bench_restart.py                        # journals of 20,000 and 200,000
    .venv/bin/python bench/bench_restart.py --sizes 2000,20000 --restarts 2   # quicker
    .venv/bin/python bench/bench_restart.py --compare-full          # also without checkpoints

Starts its own embedded Tansu broker, PostgreSQL and Redis (free ports, temp directory, stopped and
removed at the end). Per journal size N (a fresh data dir, database and topic prefix each):
1. the journal is filled with N messages (threads of 40 short messages: no thread reaches a
   compaction threshold, so only the journal's consumers work) while no node runs;
2. a real `memstream node` child process starts and publishes and processes all of it ("initial
   catch-up", which grows with N);
3. `--restarts` times: the node is stopped (SIGTERM), the broker is restarted (memory-only: every
   topic and consumer group is gone), the node is started again and, once /healthz answers, one
   new message is appended through the API. Restart-to-caught-up = node process started -> the
   lowest watermark of the journal's consumer groups (thresholds, clickhouse-projection;
   `sinks.postgres.progress.PostgresProgress.low_watermark`, read from Postgres every 50 ms)
   reaches that new message's seq, i.e. the whole journal and the new append processed by every
   journal consumer (so the consumer groups have joined the new broker and work). Also printed:
   process start -> /healthz, and the seq the node republished from (its log);
4. with `--compare-full`, the same restarts after deleting the groups' stored progress before each
   one: the node then republishes from seq 1 and the groups process everything again, which is
   what every restart did before progress was kept outside the broker.
Medians per size. Everything shares this 2-core machine (load printed).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg
import httpx
from figures import load_note
from pydantic import SecretStr
from server_group import server_group

from core.config import Settings
from core.journal.models import NewMessage, ThreadRef
from memstream.embedded import services
from memstream.embedded.bootstrap import create_key
from memstream.embedded.process import ManagedProcess, free_port
from memstream.embedded.supervisor import http_ok
from memstream.wiring.processors import consumers_of
from sinks.postgres.progress import PostgresProgress
from sinks.slatedb.journal import SlateJournal
from streams.relays.journal import JOURNAL_TOPIC
from streams.runtime.processor import group_id

PER_THREAD = 40
REFILL = re.compile(r"republishing the journal from seq (\d+)")


@dataclass
class SizeResult:
    size: int
    fill_s: float = 0.0
    initial_s: float = 0.0
    ready: list[float] = field(default_factory=list)
    caught_up: list[float] = field(default_factory=list)
    republished_from: list[int] = field(default_factory=list)
    full_ready: list[float] = field(default_factory=list)
    full_caught_up: list[float] = field(default_factory=list)


class Broker:
    """The Tansu process, restartable on its port (a restart loses every topic)."""

    def __init__(self, work: Path, port: int) -> None:
        self.work = work
        self.port = port
        self.runs = 0
        self.proc: ManagedProcess | None = None

    def start(self) -> None:
        self.runs += 1
        self.proc = services.broker_process(self.work / f"broker-{self.runs}", self.port)
        self.proc.start()

    def restart(self) -> None:
        if self.proc is not None:
            self.proc.stop()
        self.start()

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()
            self.proc = None


def node_process(settings: Settings, api_port: int, log: Path) -> ManagedProcess:
    env = {
        **os.environ,
        "MEMSTREAM_DATA_DIR": str(settings.data_path),
        "MEMSTREAM_ENVIRONMENT": settings.environment,
        "MEMSTREAM_TOPIC_PREFIX": settings.topic_prefix,
        "MEMSTREAM_BROKER_URL": f"kafka://{settings.broker_bootstrap}",
        "MEMSTREAM_POSTGRES_DSN": settings.postgres,
        "MEMSTREAM_REDIS_URL": settings.redis,
        "MEMSTREAM_API_PORT": str(api_port),
    }
    return ManagedProcess(
        name="node",
        argv=[sys.executable, "-m", "memstream", "node"],
        log_path=log,
        ready=lambda: http_ok(f"http://127.0.0.1:{api_port}/healthz"),
        env=env,
    )


async def fill(settings: Settings, size: int) -> None:
    """N messages in threads of PER_THREAD, appended 16 threads at a time."""
    journal = await SlateJournal.open(settings.journal)
    try:
        threads = (size + PER_THREAD - 1) // PER_THREAD

        async def thread(t: int) -> None:
            count = min(PER_THREAD, size - t * PER_THREAD)
            ref = ThreadRef(environment=settings.environment, account_id="bench", thread_id=f"t-{t}")
            messages = [NewMessage(role="user", content=f"Message {i} of thread {t}.") for i in range(count)]
            await journal.append(ref, "bot", None, messages)

        for first in range(0, threads, 16):
            await asyncio.gather(*(thread(t) for t in range(first, min(threads, first + 16))))
        assert await journal.last_seq() == size
    finally:
        await journal.close()


async def wait_caught_up(settings: Settings, last: int, started: float, timeout_s: float) -> float:
    """Seconds from `started` until every journal consumer group's watermark reached `last`."""
    pool = await asyncpg.create_pool(settings.postgres, min_size=1, max_size=1)
    try:
        progress = PostgresProgress(pool)
        groups = [group_id(name, settings) for name in consumers_of(JOURNAL_TOPIC)]
        topic = settings.topic(JOURNAL_TOPIC)
        while True:
            try:
                if await progress.low_watermark(groups, topic) >= last:
                    return time.monotonic() - started
            except asyncpg.UndefinedTableError:
                pass  # the node has not migrated the schema yet
            if time.monotonic() - started > timeout_s:
                raise TimeoutError(f"not caught up after {timeout_s:.0f}s")
            await asyncio.sleep(0.05)
    finally:
        await pool.close()


async def forget_progress(settings: Settings) -> None:
    pool = await asyncpg.create_pool(settings.postgres, min_size=1, max_size=1)
    try:
        await pool.execute("DELETE FROM consumer_progress")
        await pool.execute("DELETE FROM consumer_watermarks")
    finally:
        await pool.close()


def start_node(settings: Settings, work: Path, run: str) -> tuple[ManagedProcess, float, float, Path, str]:
    """(process, start time, seconds to /healthz, log, API URL) of a node started now."""
    log = work / "logs" / f"node-{run}.log"
    port = free_port()
    node = node_process(settings, port, log)
    started = time.monotonic()
    node.start(timeout=300)
    return node, started, time.monotonic() - started, log, f"http://127.0.0.1:{port}"


def append_one(url: str, key: str, n: str) -> None:
    body = {"agent_id": "bot", "messages": [{"role": "user", "content": f"After restart {n}."}]}
    response = httpx.post(
        f"{url}/v1/threads/probe-{n}/messages",
        json=body,
        headers={"Authorization": f"Bearer {key}"},
        timeout=60,
    )
    response.raise_for_status()


def run_size(
    args: argparse.Namespace, work: Path, broker: Broker, pg_port: int, redis_port: int, size: int
) -> SizeResult:
    result = SizeResult(size)
    database = f"bench_{size}"
    services.ensure_database(pg_port, database)
    settings = Settings(
        data_dir=work / f"node-{size}",
        environment="bench",
        topic_prefix=f"bench{uuid.uuid4().hex[:8]}.",
        broker_url=f"kafka://127.0.0.1:{broker.port}",
        postgres_dsn=SecretStr(f"postgresql://postgres@127.0.0.1:{pg_port}/{database}"),
        redis_url=SecretStr(f"redis://127.0.0.1:{redis_port}/0"),
    )
    print(f"\n== journal of {size:,} messages ({load_note()})", flush=True)
    t0 = time.monotonic()
    asyncio.run(fill(settings, size))
    result.fill_s = time.monotonic() - t0
    print(f"filled in {result.fill_s:.1f} s", flush=True)
    key = asyncio.run(create_key(settings, "bench", "bench"))
    node, started, _, _, _ = start_node(settings, work, f"{size}-initial")
    try:
        result.initial_s = asyncio.run(wait_caught_up(settings, size, started, args.timeout))
    finally:
        node.stop()
    last = size
    print(f"initial catch-up (publish and process everything): {result.initial_s:.1f} s", flush=True)
    modes = [("checkpoints", False)] + ([("full", True)] if args.compare_full else [])
    for mode, full in modes:
        for n in range(args.restarts):
            broker.restart()
            if full:
                asyncio.run(forget_progress(settings))
            node, started, ready_s, log, url = start_node(settings, work, f"{size}-{mode}-{n}")
            try:
                append_one(url, key, f"{mode}-{n}")
                last += 1
                caught_s = asyncio.run(wait_caught_up(settings, last, started, args.timeout))
            finally:
                node.stop()
            froms = [int(m) for m in REFILL.findall(log.read_text(errors="replace"))]
            if full:
                result.full_ready.append(ready_s)
                result.full_caught_up.append(caught_s)
            else:
                result.ready.append(ready_s)
                result.caught_up.append(caught_s)
                result.republished_from.extend(froms[-1:])
            print(
                f"restart {n + 1} ({mode}): /healthz {ready_s:.1f} s, caught up {caught_s:.1f} s, "
                f"republished from seq {froms[-1] if froms else '-'} ({load_note()})",
                flush=True,
            )
    return result


def median(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} s" if values else "-"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="20000,200000", help="journal sizes, comma-separated")
    parser.add_argument("--restarts", type=int, default=3, help="restarts per size (and mode)")
    parser.add_argument("--compare-full", action="store_true", help="also restart without stored progress")
    parser.add_argument(
        "--timeout", type=float, default=1800.0, help="give up waiting after this many seconds"
    )
    parser.add_argument("--keep", action="store_true", help="keep the temp directory")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    work = Path(tempfile.mkdtemp(prefix="memstream-bench-restart-", dir="/tmp"))
    broker_port, pg_port, redis_port = free_port(), free_port(), free_port()
    print(f"restart bench: data in {work} ({load_note()})", flush=True)
    results: list[SizeResult] = []
    broker = Broker(work, broker_port)
    with server_group(work, keep=args.keep) as servers:
        servers.start(services.postgres_process(work, pg_port))
        servers.start(services.redis_process(work, redis_port))
        broker.start()
        try:
            for size in sizes:
                results.append(run_size(args, work, broker, pg_port, redis_port, size))
        finally:
            broker.stop()
    print(
        "\n| journal | initial catch-up | restart -> /healthz (median) | restart -> caught up (median) "
        "| republished from seq | without stored progress: restart -> caught up |"
    )
    print("|---|---|---|---|---|---|")
    for r in results:
        froms = ", ".join(str(f) for f in sorted(set(r.republished_from))) or "-"
        print(
            f"| {r.size:,} | {r.initial_s:.1f} s | {median(r.ready)} | {median(r.caught_up)} | {froms} "
            f"| {median(r.full_caught_up)} |"
        )
    print(f"\ndone ({load_note()})", flush=True)


if __name__ == "__main__":
    main()
