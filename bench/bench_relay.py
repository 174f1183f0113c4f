"""Benchmark of the relay (journal -> journal.messages) on the embedded Tansu broker (prints figures).

    .venv/bin/python bench/bench_relay.py                       # defaults below
    .venv/bin/python bench/bench_relay.py --backlog 50000 --live 10000 --rate 2000

Two phases, each on a fresh SlateDB journal (local directory) and a fresh topic:
1. backlog: `--backlog` messages are appended with the relay stopped, then the relay drains them;
   throughput = messages / drain time (read from the journal, produce, wait for every broker
   confirmation, store the cursor: the whole relay round).
2. live: `--live` messages are appended at `--rate` messages/s (open loop, `--appenders` tasks,
   one message per append call) while the relay runs; a consumer (its own thread, assigned to
   every partition) records when each message arrives. Latency = consumed time - the time the
   append call returned (the acknowledgement), per message: p50/p90/p99/max. Lag (journal
   last_seq - relay cursor) is sampled every 50 ms. Run once with the relay polling
   (`idle_sleep`) and once woken by `notify()` after each append (as the node does).

Everything runs in one process on this 2-core machine (journal writer, relay, consumer), so the
figures are a floor for what a dedicated relay achieves.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from figures import pct
from topic_consumer import consumer_from_start

from core.config import Settings
from core.journal.models import NewMessage, ThreadRef
from memstream.embedded import services
from memstream.embedded.process import free_port
from sinks.slatedb.journal import SlateJournal
from streams.admin import apply_topics
from streams.codecs import journal_messages
from streams.codecs.records import header
from streams.relays.journal import Relay
from streams.topics import load_topics

CONTENT = "The quarterly report is attached; please check the revenue figures in section 3 and confirm. "


def content(i: int, size: int) -> str:
    return (f"#{i} " + CONTENT * (size // len(CONTENT) + 1))[:size]


class Collector(threading.Thread):
    """Consumes journal.messages from the beginning; records the arrival time per message id."""

    def __init__(self, settings: Settings, expected: int) -> None:
        super().__init__(daemon=True)
        self.settings = settings
        self.expected = expected
        self.arrived: dict[bytes, float] = {}
        self.records = 0
        self.stop = threading.Event()

    def run(self) -> None:
        consumer = consumer_from_start(self.settings, "journal.messages")
        try:
            while not self.stop.is_set() and len(self.arrived) < self.expected:
                for record in consumer.consume(500, 0.002):  # returns after 2 ms with what arrived
                    if record.error() is not None:
                        continue
                    now = time.monotonic()
                    self.records += 1
                    message_id = header(record.headers(), journal_messages.MESSAGE_ID_HEADER)
                    if message_id is not None:
                        self.arrived.setdefault(message_id, now)
        finally:
            consumer.close()


@dataclass
class Phase:
    name: str
    messages: int
    seconds: float
    latencies_ms: list[float] = field(default_factory=list)
    lag_samples: list[int] = field(default_factory=list)
    relay_ms: list[float] = field(default_factory=list)

    def report(self) -> str:
        line = f"{self.name:<22} {self.messages:>7} msgs  {self.messages / self.seconds:>9,.0f} msg/s"
        if self.latencies_ms:
            lat = self.latencies_ms
            line += (
                f"  latency ms p50 {pct(lat, 0.5):6.1f}  p90 {pct(lat, 0.9):6.1f}  p99 {pct(lat, 0.99):6.1f}"
                f"  max {max(lat):6.1f}"
            )
        if self.lag_samples:
            line += f"  lag mean {statistics.fmean(self.lag_samples):6.1f} max {max(self.lag_samples)}"
        if self.relay_ms:
            rel = self.relay_ms
            line += (
                f"\n{'':<22} of which append ack -> confirmed + cursor stored: ms p50 {pct(rel, 0.5):6.1f}"
                f"  p99 {pct(rel, 0.99):6.1f}"
            )
        return line


async def fresh(work: Path, bootstrap: str, name: str) -> tuple[Settings, SlateJournal]:
    settings = Settings(data_dir=work / name, broker_url=f"kafka://{bootstrap}", topic_prefix=f"bench{name}.")
    report = apply_topics(settings, load_topics())
    assert report.was_created("journal.messages")
    journal = await SlateJournal.open(f"file://{work / name / 'journal'}")
    return settings, journal


async def append_backlog(journal: SlateJournal, n: int, threads: int, size: int) -> None:
    per_call = 100
    for start in range(0, n, per_call):
        ref = ThreadRef(
            environment="bench", account_id="acme", thread_id=f"th-{(start // per_call) % threads}"
        )
        count = min(per_call, n - start)
        batch = [NewMessage(role="user", content=content(start + i, size)) for i in range(count)]
        await journal.append(ref, "bot", None, batch)


async def backlog_phase(work: Path, bootstrap: str, args: argparse.Namespace) -> Phase:
    settings, journal = await fresh(work, bootstrap, "backlog")
    await append_backlog(journal, args.backlog, args.threads, args.size)
    relay = Relay(journal, settings, batch_size=args.batch_size)
    await relay.run_once()  # connect the producer (idempotent PID) outside the measurement
    started = time.monotonic()
    while await relay.run_once():
        pass
    seconds = time.monotonic() - started
    assert (await relay.lag()).lag == 0
    await relay.close()
    await journal.close()
    return Phase(f"backlog (batch {args.batch_size})", args.backlog - args.batch_size, seconds)


async def live_phase(work: Path, bootstrap: str, args: argparse.Namespace, *, notify: bool) -> Phase:
    name = "notify" if notify else "poll"
    settings, journal = await fresh(work, bootstrap, f"live{name}")
    relay = Relay(journal, settings, batch_size=args.batch_size, idle_sleep=args.idle_sleep)
    # warm up: one message through, so the producer holds its idempotent producer id
    await journal.append(
        ThreadRef(environment="bench", account_id="acme", thread_id="warmup"),
        "bot",
        None,
        [NewMessage(role="user", content="warm-up")],
    )
    await relay.run_once()
    collector = Collector(settings, args.live + 1)
    collector.start()
    while not collector.arrived:  # noqa: ASYNC110 (a thread fills it) - the consumer is fetching now
        await asyncio.sleep(0.01)
    stop = asyncio.Event()
    relay_task = asyncio.create_task(relay.run(stop))
    acked: dict[bytes, float] = {}
    acked_seq: dict[int, float] = {}
    confirmed: list[tuple[int, float]] = []  # (cursor, when it was stored)
    lag_samples: list[int] = []
    store_cursor = journal.set_cursor

    async def recording_set_cursor(name: str, seq: int) -> None:
        await store_cursor(name, seq)
        confirmed.append((seq, time.monotonic()))

    journal.set_cursor = recording_set_cursor  # type: ignore[method-assign]

    async def sample_lag() -> None:
        while not stop.is_set():
            lag_samples.append((await relay.lag()).lag)
            await asyncio.sleep(0.05)

    async def appender(worker: int, count: int, interval: float) -> None:
        next_at = time.monotonic()
        for i in range(count):
            ref = ThreadRef(
                environment="bench", account_id="acme", thread_id=f"th-{(worker + i) % args.threads}"
            )
            msg = NewMessage(role="user", content=content(i, args.size))
            [stored] = await journal.append(ref, "bot", None, [msg])
            acked[stored.message_id.encode()] = acked_seq[stored.seq] = time.monotonic()
            if notify:
                relay.notify()
            next_at += interval
            delay = next_at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)

    sampler = asyncio.create_task(sample_lag())
    per_worker = args.live // args.appenders
    interval = args.appenders / args.rate
    started = time.monotonic()
    await asyncio.gather(*(appender(w, per_worker, interval) for w in range(args.appenders)))
    total = per_worker * args.appenders
    collector.expected = total + 1
    deadline = time.monotonic() + 60
    while len(collector.arrived) < total + 1 and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.01)
    seconds = time.monotonic() - started
    stop.set()
    await relay_task
    await sampler
    collector.stop.set()
    await asyncio.to_thread(collector.join)
    await relay.close()
    await journal.close()
    latencies = [(collector.arrived[mid] - t) * 1000 for mid, t in acked.items() if mid in collector.arrived]
    missing = total - len(latencies)
    if missing:
        print(f"  !! {missing} messages not consumed within 60 s")
    relay_ms = []
    for seq, t in acked_seq.items():
        stored_at = next(when for cursor, when in confirmed if cursor >= seq)
        relay_ms.append((stored_at - t) * 1000)
    phase = Phase(f"live {args.rate}/s ({name})", total, seconds, latencies, lag_samples, relay_ms)
    return phase


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backlog", type=int, default=50_000, help="messages drained in the backlog phase")
    parser.add_argument("--live", type=int, default=10_000, help="messages appended in each live phase")
    parser.add_argument("--rate", type=int, default=1000, help="live append rate, messages/s")
    parser.add_argument("--appenders", type=int, default=20, help="concurrent appending tasks (live)")
    parser.add_argument("--threads", type=int, default=200, help="distinct conversation threads")
    parser.add_argument("--size", type=int, default=500, help="content bytes per message")
    parser.add_argument("--batch-size", type=int, default=1000, help="relay batch size")
    parser.add_argument("--idle-sleep", type=float, default=0.02, help="relay idle poll interval, s")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="memstream-bench-relay-", dir="/tmp"))
    port = free_port()
    broker = services.broker_process(work, port)
    broker.start()
    bootstrap = f"127.0.0.1:{port}"
    print(
        f"relay bench: Tansu on {bootstrap}, {args.size}-byte messages over {args.threads} threads, "
        f"relay batch {args.batch_size}, idle_sleep {args.idle_sleep}s"
    )
    try:
        phases = [
            await backlog_phase(work, bootstrap, args),
            await live_phase(work, bootstrap, args, notify=False),
            await live_phase(work, bootstrap, args, notify=True),
        ]
        for phase in phases:
            print(phase.report())
    finally:
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
