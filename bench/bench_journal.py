"""Benchmark of the SlateDB journal (prints figures; not a test).

    .venv/bin/python bench/bench_journal.py                 # full run (a few minutes)
    .venv/bin/python bench/bench_journal.py --threads 1000  # quicker

1. Durable append throughput and latency with 1, 16 and 64 concurrent appenders, each appending
   one ~500-byte user message per call (with a caller-supplied message_id, as real callers do).
   Each configuration runs `--repeats` times on a fresh journal; the median run is reported.
   Next to it the ceiling under the journal: raw SlateDB (`raw_batches`), one writer putting
   WriteBatches of 64 x 500-byte values and awaiting each one's durability, on a database
   opened with the journal's settings (bench/bench_http.py measures the node against it).
2. Context reads: `last(thread, 20)` on random threads after populating `--threads` threads x
   `--per-thread` messages (populated with large append groups), in the writing process and
   again after reopening the journal. Also the relay read (`read_from_seq`, 1000 per call).

Timing uses time.perf_counter; latencies are per call.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from slatedb.uniffi import WriteBatch

from core.journal.models import NewMessage, ThreadRef
from sinks.slatedb.journal import SlateJournal

CONTENT = (
    "The quarterly report is attached; please check the revenue figures in section 3 and "
    "confirm whether the forecast for the next two quarters still holds given the new pricing. "
)


def message_text(i: int, size: int) -> str:
    return (f"#{i} " + CONTENT * (size // len(CONTENT) + 1))[:size]


def percentile(sorted_values: list[float], q: float) -> float:
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[index]


@dataclass
class AppendRun:
    appends: int
    seconds: float
    latencies: list[float]
    batches: int

    @property
    def per_second(self) -> float:
        return self.appends / self.seconds


async def append_run(directory: Path, concurrency: int, duration: float) -> AppendRun:
    shutil.rmtree(directory, ignore_errors=True)
    journal = await SlateJournal.open(f"file://{directory}")
    latencies: list[float] = []
    stop_at = time.perf_counter() + duration

    async def appender(worker: int) -> None:
        thread = ThreadRef(environment="bench", account_id="acc", thread_id=f"t{worker}")
        i = 0
        while time.perf_counter() < stop_at:
            message = NewMessage(role="user", content=message_text(i, 500), message_id=uuid.uuid4().hex)
            started = time.perf_counter()
            await journal.append(thread, "agent", "user", [message])
            latencies.append(time.perf_counter() - started)
            i += 1

    warm = ThreadRef(environment="bench", account_id="acc", thread_id="warm-up")
    await journal.append(warm, "agent", None, [NewMessage(role="user", content="warm-up")])
    started = time.perf_counter()
    await asyncio.gather(*(appender(w) for w in range(concurrency)))
    seconds = time.perf_counter() - started
    batches = journal.stats.batches - 1
    await journal.close()
    return AppendRun(len(latencies), seconds, sorted(latencies), batches)


async def raw_batches(directory: Path, duration: float, batch: int = 64, size: int = 500) -> float:
    """Durable values/s of raw SlateDB: one writer, WriteBatches of `batch` x `size`-byte values,
    each `await_durable`d before the next, for `duration` s on a fresh database at `directory`
    (opened as the journal opens it: same settings, 2 ms flush interval; its rows are not used)."""
    shutil.rmtree(directory, ignore_errors=True)
    journal = await SlateJournal.open(f"file://{directory}")
    db = journal._db  # the journal's own SlateDB handle: raw writes, no journal logic
    value = message_text(0, size).encode()
    written = 0
    started = time.perf_counter()
    while time.perf_counter() - started < duration:
        writes = WriteBatch()
        for i in range(written, written + batch):
            writes.put(b"raw/%012d" % i, value)
        await (await db.write(writes)).await_durable()
        written += batch
    seconds = time.perf_counter() - started
    await journal.close()
    return written / seconds


async def bench_appends(root: Path, duration: float, repeats: int) -> None:
    print(f"== durable appends: 1 message of 500 chars per call, {duration:.0f} s runs, median of {repeats}")
    print(f"{'appenders':>9} {'appends/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'msgs/batch':>10}")
    for concurrency in (1, 16, 64):
        directory = root / f"appends-{concurrency}"
        runs = [await append_run(directory, concurrency, duration) for _ in range(repeats)]
        run = sorted(runs, key=lambda r: r.per_second)[len(runs) // 2]
        print(
            f"{concurrency:>9} {run.per_second:>10.0f} {percentile(run.latencies, 0.5) * 1e3:>8.2f}"
            f" {percentile(run.latencies, 0.99) * 1e3:>8.2f} {run.appends / max(run.batches, 1):>10.1f}"
        )
    raw = sorted([await raw_batches(root / "raw", duration) for _ in range(repeats)])[repeats // 2]
    print(f"raw SlateDB, WriteBatch of 64 x 500 B, await_durable, one writer: {raw:,.0f} values/s")


async def populate(journal: SlateJournal, threads: int, per_thread: int, size: int) -> None:
    started = time.perf_counter()
    next_thread = 0
    done = 0
    step = max(1, threads // 10)

    async def worker() -> None:
        nonlocal next_thread, done
        while next_thread < threads:
            t = next_thread
            next_thread += 1
            thread = ThreadRef(environment="bench", account_id="acc", thread_id=f"thread-{t}")
            roles = ("user", "assistant")
            batch = [NewMessage(role=roles[i % 2], content=message_text(i, size)) for i in range(per_thread)]
            await journal.append(thread, "agent", "user", batch)
            done += 1
            if done % step == 0:
                elapsed = time.perf_counter() - started
                print(
                    f"   populated {done}/{threads} threads, {done * per_thread} messages,"
                    f" {elapsed:.1f} s ({done * per_thread / elapsed:.0f} msg/s)",
                    flush=True,
                )

    await asyncio.gather(*(worker() for _ in range(64)))
    elapsed = time.perf_counter() - started
    total = threads * per_thread
    stats = journal.stats
    print(
        f"   populate: {total} messages in {elapsed:.1f} s = {total / elapsed:.0f} durable msg/s"
        f" ({stats.batches} write batches)"
    )


async def measure_reads(journal: SlateJournal, threads: int, samples: int, label: str) -> None:
    rng = random.Random(7)
    latencies: list[float] = []
    for _ in range(samples):
        thread_id = f"thread-{rng.randrange(threads)}"
        thread = ThreadRef(environment="bench", account_id="acc", thread_id=thread_id)
        started = time.perf_counter()
        context = await journal.last(thread, 20)
        latencies.append(time.perf_counter() - started)
        assert len(context) == 20
    latencies.sort()
    print(
        f"   last(thread, 20) {label}: p50 {percentile(latencies, 0.5) * 1e3:.2f} ms,"
        f" p99 {percentile(latencies, 0.99) * 1e3:.2f} ms ({samples} random threads)"
    )
    started = time.perf_counter()
    seq, read = 0, 0
    while read < 50_000:
        batch = await journal.read_from_seq(seq, 1000)
        if not batch:
            break
        seq, read = batch[-1].seq, read + len(batch)
    elapsed = time.perf_counter() - started
    print(f"   read_from_seq {label}: {read / elapsed:.0f} msg/s (1000 per call)")


async def bench_reads(root: Path, threads: int, per_thread: int, size: int, samples: int) -> None:
    print(f"== context reads: {threads} threads x {per_thread} messages of {size} chars")
    directory = root / "reads"
    shutil.rmtree(directory, ignore_errors=True)
    journal = await SlateJournal.open(f"file://{directory}")
    await populate(journal, threads, per_thread, size)
    await measure_reads(journal, threads, samples, "in the writing process")
    await journal.close()
    journal = await SlateJournal.open(f"file://{directory}")
    await measure_reads(journal, threads, samples, "after reopening")
    await journal.close()


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dir", type=Path, default=None, help="work directory (default: a temp dir)")
    parser.add_argument("--duration", type=float, default=3.0, help="seconds per append run")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=10_000)
    parser.add_argument("--per-thread", type=int, default=50)
    parser.add_argument("--size", type=int, default=300, help="characters per populated message")
    parser.add_argument("--samples", type=int, default=2_000)
    parser.add_argument("--skip-appends", action="store_true")
    args = parser.parse_args()
    root = args.dir or Path(tempfile.mkdtemp(prefix="bench-journal-"))
    try:
        if not args.skip_appends:
            await bench_appends(root, args.duration, args.repeats)
        await bench_reads(root, args.threads, args.per_thread, args.size, args.samples)
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)
    print("median of per-call latencies = p50; throughput = median run")


if __name__ == "__main__":
    asyncio.run(main())
