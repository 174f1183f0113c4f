"""Benchmark of the transcript projection: search over N messages, projection throughput and lag,
replay rate (prints figures).

    .venv/bin/python bench/bench_transcripts.py                       # 1,000,000 messages (~4 min)
    .venv/bin/python bench/bench_transcripts.py --messages 100000     # quick run (< 2 min)
    .venv/bin/python bench/bench_transcripts.py --skip-projection     # search only

Everything runs in this process against the embedded engines: one chdb data path in a fresh temp
directory (a process can open only one, so each part has its own database on it) and, for parts 2
and 3, a Tansu broker started on a free port (memory storage, stopped and removed at the end).
Conversations come from `transcript_corpus.Corpus` (seeded, so every run has the same data: a
Zipf-weighted vocabulary of `--vocabulary` words, 10-90 messages per thread of 20-60 words each,
user and assistant turns plus a system prompt per thread and tool call/result rows, over
`--accounts` accounts x `--agents` agents with account k holding a share ~ 1/k of the threads).

1. Search (`ClickHouseTranscriptStore.search`, as `journal_message_search` calls it, limit 10):
   `--messages` rows are bulk-inserted with `store.insert` in batches of `--insert-batch` (insert
   rate = rows / time inside the insert calls; generating the rows is timed apart), background
   merges are given up to 120 s to settle, and the table's on-disk size is read from
   `system.parts` / `system.data_skipping_indices`. Then `--queries` timed searches per scope
   after `--warmup` untimed ones: scope `all_threads` of a random agent (every agent equally
   likely, so mostly small tenants), of the largest agent, of a random agent narrowed to one of its
   users, and `current_thread` (one random thread). Queries are 1-3 words, cycling through three
   kinds: one common word (rank < 100), one rare word (rank >= 1,000), and 2-3 words mixing
   common, middle (rank 100-1,000) and rare. Figures: p50/p90/p99/max per scope, plus p50/p99 per
   query kind, and the mean number of hits. Then again after `OPTIMIZE TABLE ... FINAL` (one part
   per month; skip with `--no-optimize`): the per-query cost grows with the number of parts.
2. Projection, through the real `clickhouse-projection` processor (`ClickHouseProjection`, its own
   batching of 4,000 records / 250 ms) under `run_processors` (node's default runtime options) and
   a real broker. Backlog: `--backlog` journal records (`streams.codecs.journal_messages.encode` of
   `Message`s, environment `bench`) are published to `journal.messages` (random topic prefix)
   with the relay's producer settings; then the processor starts on a fresh group: rows/s from
   its first batch to the moment it has processed all N (every `process()` returns after the
   insert), and from its start (group join included); the store's `row_count()` must be N.
   Live, with the processor still running: one phase per rate of `--rates` (default 1,000 then
   3,000 messages/s), `--live-seconds` each (open loop, produced every 10 ms in equal slices;
   threads interleaved, each in offset order; environment `live<rate>`). Every `--poll-ms` a query
   reads the `seq`s visible in ClickHouse (`environment = 'live<rate>' AND seq >
   lowest-not-yet-seen`); a message's latency = the start of the first poll that saw it (taken on
   the chdb thread, so never before the insert it waits behind) - the time its `produce()` was
   called. So latency includes the broker, faust's fetch, the batch window and
   the insert, and is up to one poll interval late. Lag = produced - visible, sampled at every
   poll. The processor also notes when each record's batch started and finished, which splits
   latency into broker + fetch + batch window, and `process()` (decode + insert).
3. Replay: the processor is stopped and a second instance of it is started on a new consumer
   group (`--replay-by new-group`, the default), which starts at the earliest offset. The other
   way, `--replay-by reset`, resets the processor's own group to offset 0 on every partition with
   AdminClient `alter_consumer_group_offsets`, checks it with `list_consumer_group_offsets` and
   restarts the processor on that group; here Tansu refuses it (UNKNOWN_MEMBER_ID, still after
   60 s: the member of the stopped `run_processors` app never left the group). Either way the new
   instance starts with nothing but the store. Replay rate = records / time from its first batch
   until it has processed the whole topic (backlog + live: the count is known here, never taken from
   Tansu's high watermark); then `row_count()` must still equal backlog + live (idempotence),
   while the raw `count()` shows the copies not merged away yet.

This 2-core machine is shared (other engineers' tests, the broker, chdb's merges and this Python
process, which publishes, consumes, decodes, inserts and polls): the load average is printed before
each part. Read the figures as orders of magnitude.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import logging
import random
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from figures import load_note, pct
from pydantic import SecretStr
from transcript_corpus import Corpus

from core.config import Settings
from core.journal.models import Message, ToolCall
from core.stores.transcripts import TranscriptRow, TranscriptScope
from memstream.embedded import services
from memstream.embedded.process import free_port
from processors.clickhouse_projection import NAME as PROCESSOR
from processors.clickhouse_projection import ClickHouseProjection
from sinks.clickhouse.store import ClickHouseTranscriptStore
from streams.admin import apply_topics
from streams.codecs import journal_messages
from streams.codecs.records import header
from streams.producer import make_producer
from streams.runtime import run_processors
from streams.runtime.processor import Record, group_id
from streams.topics import TopicRegistry, load_topics

ENVIRONMENT = "bench"
LIVE_ENVIRONMENT = "live"  # + the rate: one environment per live phase
SEARCH_DATABASE = "bench_search"
PROJECTION_DATABASE = "bench_projection"
SOURCE = "journal.messages"
REPLAY_PROCESSOR = f"{PROCESSOR}-replay"


def ms_line(seconds: Sequence[float]) -> str:
    v = [s * 1000 for s in seconds]
    if not v:
        return "(none)"
    return f"p50 {pct(v, 0.5):7.1f}  p90 {pct(v, 0.9):7.1f}  p99 {pct(v, 0.99):7.1f}  max {max(v):7.1f} ms"


def directory_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def mib(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"


class BenchStore(ClickHouseTranscriptStore):
    """The real store, plus read-only queries of the benchmark's own (run on the store's thread)."""

    async def select(self, sql: str, params: dict[str, Any] | None = None) -> list[Sequence[Any]]:
        rows = await self._client.run(
            "bench query", lambda c: c.query(sql, parameters=params or {}).result_rows
        )
        return list(rows)

    async def select_timed(self, sql: str, params: dict[str, Any]) -> tuple[float, list[Sequence[Any]]]:
        """`select`, with the monotonic time the query started on the store's thread."""

        def call(client: Any) -> tuple[float, list[Sequence[Any]]]:
            started = time.monotonic()
            return started, list(client.query(sql, parameters=params).result_rows)

        result: tuple[float, list[Sequence[Any]]] = await self._client.run("bench poll", call)
        return result

    async def settle_merges(self, limit_s: float = 120.0) -> float:
        """Wait (at most `limit_s`) until no merge of this database runs twice in a row; seconds waited."""
        started = time.monotonic()
        quiet = 0
        while quiet < 2 and time.monotonic() - started < limit_s:
            [(running,)] = await self.select(
                "SELECT count() FROM system.merges WHERE database = {db:String}", {"db": self.database}
            )
            quiet = quiet + 1 if running == 0 else 0
            await asyncio.sleep(1.0)
        return time.monotonic() - started

    async def size(self) -> dict[str, int]:
        [(parts, rows, on_disk, compressed, uncompressed)] = await self.select(
            "SELECT count(), sum(rows), sum(bytes_on_disk), sum(data_compressed_bytes), "
            "sum(data_uncompressed_bytes) FROM system.parts "
            "WHERE database = {db:String} AND table = 'messages' AND active",
            {"db": self.database},
        )
        indexes = await self.select(
            "SELECT name, data_compressed_bytes FROM system.data_skipping_indices "
            "WHERE database = {db:String} AND table = 'messages'",
            {"db": self.database},
        )
        sizes = {
            "parts": int(parts),
            "rows": int(rows),
            "on_disk": int(on_disk),
            "compressed": int(compressed),
            "uncompressed": int(uncompressed),
        }
        sizes.update({f"index:{name}": int(size) for name, size in indexes})
        return sizes

    async def raw_count(self) -> int:
        [(n,)] = await self.select(f"SELECT count() FROM {self.database}.messages")
        return int(n)


# ---------------------------------------------------------------------------- 1. search


@dataclass
class Population:
    """What was inserted, for picking query scopes."""

    agent_messages: dict[tuple[str, str], int] = field(default_factory=dict)
    agent_users: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    threads: list[tuple[str, str, str | None, str]] = field(default_factory=list)  # account, agent, user, id


async def populate(store: BenchStore, corpus: Corpus, args: argparse.Namespace) -> Population:
    pop = Population()
    batch: list[TranscriptRow] = []
    inserted = 0
    insert_s = 0.0
    started = time.monotonic()
    next_report = started

    async def flush() -> None:
        nonlocal inserted, insert_s, next_report
        t0 = time.perf_counter()
        await store.insert(batch)
        insert_s += time.perf_counter() - t0
        inserted += len(batch)
        batch.clear()
        now = time.monotonic()
        if now >= next_report or inserted >= args.messages:
            print(
                f"  {inserted:>9,}/{args.messages:,} rows inserted, {inserted / insert_s:,.0f} rows/s inside "
                f"insert, {now - started:.0f} s elapsed",
                flush=True,
            )
            next_report = now + 10

    threads = corpus.threads(
        args.messages, environment=ENVIRONMENT, accounts=args.accounts, agents=args.agents, users=args.users
    )
    for rows in threads:
        first = rows[0]
        agent = (first.account_id, first.agent_id)
        pop.agent_messages[agent] = pop.agent_messages.get(agent, 0) + len(rows)
        if first.user_id is not None:
            pop.agent_users.setdefault(agent, set()).add(first.user_id)
        pop.threads.append((first.account_id, first.agent_id, first.user_id, first.thread_id))
        batch.extend(rows)
        if len(batch) >= args.insert_batch:
            await flush()
    if batch:
        await flush()
    total_s = time.monotonic() - started
    print(
        f"  inserted {inserted:,} rows ({len(pop.threads):,} threads, {len(pop.agent_messages)} agents) in "
        f"{total_s:.1f} s: {inserted / insert_s:,.0f} rows/s inside the insert calls ({insert_s:.1f} s), "
        f"{inserted / total_s:,.0f} rows/s including generating them",
        flush=True,
    )
    return pop


QUERY_KINDS = ("1 common", "1 rare", "2-3 mixed")


def make_queries(corpus: Corpus, rng: random.Random, n: int) -> list[tuple[str, str]]:
    """`n` (kind, query) pairs cycling through QUERY_KINDS (module doc)."""
    common = corpus.rank_band(0, 100)
    middle = corpus.rank_band(100, 1000)
    rare = corpus.rank_band(1000, len(corpus.vocabulary))
    out: list[tuple[str, str]] = []
    for i in range(n):
        kind = QUERY_KINDS[i % len(QUERY_KINDS)]
        if kind == "1 common":
            words = [rng.choice(common)]
        elif kind == "1 rare":
            words = [rng.choice(rare)]
        else:
            bands = [common, middle, rare]
            rng.shuffle(bands)
            words = [rng.choice(band) for band in bands[: rng.randint(2, 3)]]
        out.append((kind, " ".join(words)))
    return out


ScopePick = Callable[[random.Random], tuple[TranscriptScope, str | None]]


async def time_searches(
    store: BenchStore, label: str, pick: ScopePick, queries: list[tuple[str, str]], warmup: int, seed: int
) -> dict[str, Any]:
    rng = random.Random(seed)
    for _, query in queries[:warmup]:
        scope, thread = pick(rng)
        await store.search(scope, query, thread_id=thread, limit=10)
    by_kind: dict[str, list[float]] = {kind: [] for kind in QUERY_KINDS}
    times: list[float] = []
    hits: list[int] = []
    for kind, query in queries:
        scope, thread = pick(rng)
        t0 = time.perf_counter()
        found = await store.search(scope, query, thread_id=thread, limit=10)
        elapsed = time.perf_counter() - t0
        times.append(elapsed)
        by_kind[kind].append(elapsed)
        hits.append(len(found))
    kinds = "; ".join(
        f"{kind}: p50 {pct(v, 0.5) * 1000:.1f} / p99 {pct(v, 0.99) * 1000:.1f}" for kind, v in by_kind.items()
    )
    print(
        f"  {label:<44} {ms_line(times)}  mean hits {statistics.fmean(hits):4.1f}\n"
        f"  {'':<44} by query (ms) {kinds}",
        flush=True,
    )
    return {"label": label, "times": times, "hits": hits}


async def search_part(dsn: str, corpus: Corpus, args: argparse.Namespace) -> None:
    print(
        f"\n1. search: {args.messages:,} messages over {args.accounts} accounts x {args.agents} agents, "
        f"vocabulary {len(corpus.vocabulary):,} words ({load_note()})",
        flush=True,
    )
    store = BenchStore(dsn, database=SEARCH_DATABASE)
    try:
        await store.ensure_schema()
        pop = await populate(store, corpus, args)
        waited = await store.settle_merges()
        size = await store.size()
        du = await asyncio.to_thread(directory_bytes, Path(dsn.removeprefix("chdb://")))
        index = ", ".join(f"{k.split(':')[1]} {mib(v)}" for k, v in size.items() if k.startswith("index:"))
        print(
            f"  merges settled after {waited:.0f} s: {size['parts']} active parts, {size['rows']:,} rows; "
            f"on disk {mib(size['on_disk'])} (columns compressed {mib(size['compressed'])} from "
            f"{mib(size['uncompressed'])}; indexes: {index}); chdb directory {mib(du)} (with merged-away "
            "parts not removed yet)",
            flush=True,
        )
        agents = sorted(pop.agent_messages)
        largest = max(agents, key=lambda a: pop.agent_messages[a])
        sizes = sorted(pop.agent_messages.values())
        with_users = [a for a in agents if pop.agent_users.get(a)]
        print(
            f"  messages per agent: median {statistics.median(sizes):,.0f}, max {sizes[-1]:,} "
            f"({largest[0]}/{largest[1]}), min {sizes[0]:,}; {args.queries} queries per scope after "
            f"{args.warmup} warm-up ({load_note()})",
            flush=True,
        )

        def random_agent(rng: random.Random) -> tuple[TranscriptScope, str | None]:
            account, agent = rng.choice(agents)
            return TranscriptScope(ENVIRONMENT, account, agent), None

        def largest_agent(rng: random.Random) -> tuple[TranscriptScope, str | None]:
            return TranscriptScope(ENVIRONMENT, *largest), None

        def agent_user(rng: random.Random) -> tuple[TranscriptScope, str | None]:
            account, agent = rng.choice(with_users)
            user = rng.choice(sorted(pop.agent_users[(account, agent)]))
            return TranscriptScope(ENVIRONMENT, account, agent, user), None

        def one_thread(rng: random.Random) -> tuple[TranscriptScope, str | None]:
            account, agent, user, thread = rng.choice(pop.threads)
            return TranscriptScope(ENVIRONMENT, account, agent, user), thread

        queries = make_queries(corpus, random.Random(args.seed + 2), args.queries)
        scopes: list[tuple[str, ScopePick]] = [
            ("all_threads, random agent", random_agent),
            (f"all_threads, largest agent ({pop.agent_messages[largest]:,} msgs)", largest_agent),
            ("all_threads, random agent + user", agent_user),
            ("current_thread, random thread", one_thread),
        ]
        print(f"  after the bulk insert ({size['parts']} active parts):", flush=True)
        for i, (label, pick) in enumerate(scopes):
            await time_searches(store, label, pick, queries, args.warmup, args.seed + 10 + i)
        if args.no_optimize:
            return
        t0 = time.monotonic()
        await store.select(f"OPTIMIZE TABLE {SEARCH_DATABASE}.messages FINAL")
        size = await store.size()
        print(
            f"  after OPTIMIZE TABLE ... FINAL ({time.monotonic() - t0:.1f} s; {size['parts']} active parts, "
            f"one per month; on disk {mib(size['on_disk'])}) ({load_note()}):",
            flush=True,
        )
        for i, (label, pick) in enumerate(scopes):
            await time_searches(store, label, pick, queries, args.warmup, args.seed + 10 + i)
    finally:
        await store.close()


# ---------------------------------------------------------------------------- 2./3. projection


def message_of(row: TranscriptRow) -> Message:
    call = None
    if row.tool_call_id is not None:
        call = ToolCall(
            id=row.tool_call_id, name=row.tool_name, arguments=row.tool_arguments, result=row.tool_result
        )
    return Message(
        message_id=row.message_id,
        environment=row.environment,
        account_id=row.account_id,
        agent_id=row.agent_id,
        user_id=row.user_id,
        thread_id=row.thread_id,
        offset=row.offset,
        seq=row.seq,
        role=row.role,
        content=row.content,
        reasoning=row.reasoning,
        tool_call=call,
        created_at=row.created_at,
        token_count=row.token_count,
    )


def interleaved(
    corpus: Corpus, n: int, environment: str, prefix: str, args: argparse.Namespace
) -> list[Message]:
    """`n` messages of many threads interleaved (each thread in offset order), seq = publish order."""
    rows = [
        row
        for thread in corpus.threads(
            n, environment=environment, accounts=args.accounts, agents=args.agents, thread_prefix=prefix
        )
        for row in thread
    ]
    rows.sort(key=lambda r: (r.offset, r.thread_id))
    return [message_of(dataclasses.replace(row, seq=i + 1)) for i, row in enumerate(rows)]


def produce(producer: Producer, topic: str, message: Message) -> None:
    event = journal_messages.encode(message)
    while True:
        try:
            producer.produce(topic, event.value, event.key, headers=event.headers)
            return
        except BufferError:
            producer.poll(0.05)


class TimedProjection(ClickHouseProjection):
    """The real processor, unchanged, counting records and noting when each batch started/finished."""

    def __init__(self, store: BenchStore, name: str = PROCESSOR) -> None:
        super().__init__(store, name=name, close_store=False)
        self.records = 0
        self.first_batch_at: float | None = None
        self.last_batch_done: float = 0.0
        self.batches: list[tuple[int, float]] = []  # (records, process() seconds)
        self.handled: dict[bytes, tuple[float, float]] = {}  # live message id -> (start, end)
        self.track = False

    async def process(self, batch: Sequence[Record]) -> None:
        t0 = time.monotonic()
        if self.first_batch_at is None:
            self.first_batch_at = t0
        await super().process(batch)
        t1 = time.monotonic()
        self.records += len(batch)
        self.last_batch_done = t1
        self.batches.append((len(batch), t1 - t0))
        if self.track:
            for record in batch:
                message_id = header(record.headers, journal_messages.MESSAGE_ID_HEADER)
                if message_id is not None:
                    self.handled.setdefault(message_id, (t0, t1))


class Runner:
    """One run of the processor under `run_processors` in this loop."""

    def __init__(self, projection: TimedProjection, settings: Settings, registry: TopicRegistry) -> None:
        self.projection = projection
        self.stop = asyncio.Event()
        self.started = asyncio.Event()
        self.began = time.monotonic()
        self.task = asyncio.create_task(
            run_processors([projection], settings, self.stop, started=self.started, registry=registry)
        )

    async def until(self, records: int, what: str, store: BenchStore, limit_s: float) -> float:
        """Wait until the processor has processed `records`; returns the monotonic time it had."""
        deadline = time.monotonic() + limit_s
        next_report = time.monotonic() + 5
        p = self.projection
        while p.records < records:
            if self.task.done():
                self.task.result()
                raise RuntimeError("the processor stopped")
            now = time.monotonic()
            if now > deadline:
                raise RuntimeError(f"{what}: {p.records:,}/{records:,} records after {limit_s:.0f} s")
            if now >= next_report:
                rate = p.records / (now - p.first_batch_at) if p.first_batch_at else 0.0
                print(
                    f"  {what}: {p.records:>9,}/{records:,} records processed ({rate:,.0f}/s), "
                    f"{await store.raw_count():,} rows stored, {now - self.began:.0f} s since start",
                    flush=True,
                )
                next_report = now + 5
            await asyncio.sleep(0.02)
        return p.last_batch_done

    async def close(self) -> None:
        self.stop.set()
        await self.task


async def backlog_phase(
    settings: Settings, registry: TopicRegistry, store: BenchStore, corpus: Corpus, args: argparse.Namespace
) -> tuple[Runner, TimedProjection]:
    topic = settings.topic(SOURCE)
    n = args.backlog
    t0 = time.monotonic()
    messages = interleaved(corpus, n, ENVIRONMENT, "pb", args)
    print(f"  {n:,} journal messages built in {time.monotonic() - t0:.1f} s", flush=True)
    producer = make_producer(settings, client_id="bench-transcripts", overrides={"linger.ms": 20})
    t0 = time.monotonic()
    for i, message in enumerate(messages):
        produce(producer, topic, message)
        if i % 1000 == 0:
            producer.poll(0)
    remaining = producer.flush(120)
    if remaining:
        raise RuntimeError(f"{remaining} records not delivered")
    publish_s = time.monotonic() - t0
    print(
        f"  published to {topic} in {publish_s:.1f} s ({n / publish_s:,.0f} records/s) ({load_note()})",
        flush=True,
    )
    projection = TimedProjection(store)
    runner = Runner(projection, settings, registry)
    done = await runner.until(n, "backlog", store, args.timeout)
    assert projection.first_batch_at is not None
    busy = done - projection.first_batch_at
    rows = await store.row_count()
    if rows != n:
        FAILURES.append(f"backlog: row_count() {rows:,}, expected {n:,}")
    sizes = [b for b, _ in projection.batches]
    print(
        f"  backlog: {n:,} records projected: {n / busy:,.0f} rows/s from the first batch ({busy:.1f} s), "
        f"{n / (done - runner.began):,.0f} rows/s from the processor's start ({done - runner.began:.1f} s, "
        f"group join {projection.first_batch_at - runner.began:.1f} s included); {len(sizes)} batches, "
        f"mean {statistics.fmean(sizes):,.0f} records, process() p50 "
        f"{statistics.median(s for _, s in projection.batches) * 1000:.0f} ms; row_count() {rows:,}"
        + ("" if rows == n else f"  !! expected {n:,}"),
        flush=True,
    )
    return runner, projection


async def live_phase(
    settings: Settings,
    store: BenchStore,
    projection: TimedProjection,
    corpus: Corpus,
    args: argparse.Namespace,
    rate: int,
) -> int:
    """Produce `rate` messages/s for `--live-seconds` (environment `live<rate>`); messages produced."""
    topic = settings.topic(SOURCE)
    total = int(rate * args.live_seconds)
    environment = f"{LIVE_ENVIRONMENT}{rate}"
    messages = interleaved(corpus, total, environment, f"pl{rate}", args)
    by_id = {m.message_id.encode(): m.seq for m in messages}
    producer = make_producer(settings, client_id="bench-transcripts-live")
    produced_at: dict[int, float] = {}
    seen_at: dict[int, float] = {}
    lag: list[int] = []
    poll_s = args.poll_ms / 1000
    done_producing = asyncio.Event()
    projection.track = True
    batches_before = len(projection.batches)
    print(
        f"\n  live: {rate:,} messages/s for {args.live_seconds:.0f} s ({total:,} messages), "
        f"ClickHouse polled every {args.poll_ms:.0f} ms ({load_note()})",
        flush=True,
    )

    async def poller() -> None:
        floor = 0  # every seq <= floor was seen
        grace: float | None = None
        while True:
            started, rows = await store.select_timed(
                f"SELECT seq FROM {PROJECTION_DATABASE}.messages "
                "WHERE environment = {env:String} AND seq > {floor:UInt64}",
                {"env": environment, "floor": floor},
            )
            for (seq,) in rows:
                seen_at.setdefault(int(seq), started)
            while floor + 1 in seen_at:
                floor += 1
            lag.append(len(produced_at) - len(seen_at))
            if done_producing.is_set():
                if len(seen_at) >= total:
                    return
                grace = grace or time.monotonic() + 60
                if time.monotonic() > grace:
                    return
            await asyncio.sleep(poll_s)

    polling = asyncio.create_task(poller())
    start = time.monotonic()
    sent = 0
    while sent < total:
        due = min(total, int((time.monotonic() - start) * rate) + 1)
        while sent < due:
            message = messages[sent]
            produced_at[message.seq] = time.monotonic()
            produce(producer, topic, message)
            sent += 1
        producer.poll(0)
        await asyncio.sleep(0.01)
    send_s = time.monotonic() - start
    done_producing.set()
    await asyncio.to_thread(producer.flush, 60)
    await polling
    projection.track = False
    latencies = [seen_at[s] - t for s, t in produced_at.items() if s in seen_at]
    missing = total - len(latencies)
    to_batch = [
        projection.handled[m][0] - produced_at[s] for m, s in by_id.items() if m in projection.handled
    ]
    in_batch = [projection.handled[m][1] - projection.handled[m][0] for m in by_id if m in projection.handled]
    sizes = [b for b, _ in projection.batches[batches_before:]]
    print(
        f"  live: {total:,} messages produced in {send_s:.1f} s ({total / send_s:,.0f}/s); produce() -> "
        f"visible in ClickHouse: {ms_line(latencies)}"
        + (f"  !! {missing} never seen" if missing else "")
        + f"\n      produce() -> batch handed to process() (broker, fetch, batch window): {ms_line(to_batch)}"
        f"\n      process() (decode + insert): {ms_line(in_batch)} ({len(sizes)} batches, mean "
        f"{statistics.fmean(sizes) if sizes else 0:,.0f} records)"
        f"\n      lag (produced - visible, {len(lag)} samples): mean {statistics.fmean(lag):,.0f}, "
        f"p99 {pct(lag, 0.99):,.0f}, max {max(lag):,} messages",
        flush=True,
    )
    return total


def reset_to_earliest(
    settings: Settings, group: str, partitions: int, limit_s: float = 30.0
) -> tuple[float, int]:
    """Commit offset 0 on every partition of the source topic for `group`: (seconds, refusals)."""
    admin = AdminClient({"bootstrap.servers": settings.broker_bootstrap})
    topic = settings.topic(SOURCE)
    started = time.monotonic()
    targets = [TopicPartition(topic, p, 0) for p in range(partitions)]
    refusals = 0
    while True:
        try:
            result = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, targets)])[group]
            errors = [str(tp.error) for tp in result.result(timeout=30).topic_partitions if tp.error]
        except KafkaException as exc:
            errors = [str(exc)]
        if not errors:
            break
        # a stopped faust member never leaves its group on Tansu: refused until its session expires
        if time.monotonic() - started > limit_s:
            raise RuntimeError(f"reset of {group} refused for {limit_s:.0f} s: {errors[0]}")
        if refusals == 0:
            print(f"  reset refused ({errors[0]}), retrying every second", flush=True)
        refusals += 1
        time.sleep(1.0)
    listed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result()
    offsets = {tp.partition: tp.offset for tp in listed.topic_partitions if tp.topic == topic}
    if offsets != {p: 0 for p in range(partitions)}:
        raise RuntimeError(f"group {group} offsets after the reset: {offsets}")
    return time.monotonic() - started, refusals


async def replay_phase(
    settings: Settings, registry: TopicRegistry, store: BenchStore, total: int, how: str
) -> None:
    if how == "reset":
        group = group_id(PROCESSOR, settings)
        partitions = load_topics().get(SOURCE).partitions
        took, refusals = await asyncio.to_thread(reset_to_earliest, settings, group, partitions)
        print(
            f"  replay: group {group} reset to offset 0 on {partitions} partitions in {took:.1f} s "
            f"(AdminClient alter_consumer_group_offsets, processor stopped; {refusals} refusals first) "
            f"({load_note()})",
            flush=True,
        )
        name = PROCESSOR
    else:
        name = REPLAY_PROCESSOR
        print(
            f"  replay: a second instance of the processor on a new group {group_id(name, settings)} "
            f"(starts at the earliest offset), same store ({load_note()})",
            flush=True,
        )
    before = await store.raw_count()
    projection = TimedProjection(store, name)
    runner = Runner(projection, settings, registry)
    try:
        done = await runner.until(total, "replay", store, 900)
    finally:
        await runner.close()
    assert projection.first_batch_at is not None
    busy = done - projection.first_batch_at
    rows = await store.row_count()
    if rows != total:
        FAILURES.append(f"replay: row_count() {rows:,}, expected {total:,} (not idempotent)")
    raw = await store.raw_count()
    print(
        f"  replay: {projection.records:,} records re-consumed: {projection.records / busy:,.0f} records/s "
        f"from the first batch ({busy:.1f} s; group join "
        f"{projection.first_batch_at - runner.began:.1f} s before it); "
        f"row_count() {rows:,} (expected {total:,}: {'idempotent' if rows == total else 'MISMATCH'}); "
        f"raw count() {before:,} before, {raw:,} after (copies not merged away yet)",
        flush=True,
    )


async def projection_part(
    dsn: str, corpus: Corpus, bootstrap: str, work: Path, args: argparse.Namespace
) -> None:
    settings = Settings(
        data_dir=work / "node",
        environment=ENVIRONMENT,
        topic_prefix=f"bench{uuid.uuid4().hex[:8]}.",
        broker_url=f"kafka://{bootstrap}",
        clickhouse_dsn=SecretStr(dsn),
        clickhouse_database=PROJECTION_DATABASE,
    )
    # the replay instance (a second processor name) has its own dead-letter topic
    registry = load_topics().with_dead_letter(REPLAY_PROCESSOR)
    await asyncio.to_thread(apply_topics, settings, registry)
    print(
        f"\n2. projection: clickhouse-projection on Tansu {bootstrap}, topic prefix {settings.topic_prefix}, "
        f"backlog {args.backlog:,} records ({load_note()})",
        flush=True,
    )
    store = BenchStore(dsn, database=PROJECTION_DATABASE)
    try:
        await store.ensure_schema()
        runner, projection = await backlog_phase(settings, registry, store, corpus, args)
        try:
            live = 0
            for rate in args.rates:
                live += await live_phase(settings, store, projection, corpus, args, rate)
        finally:
            await runner.close()
        print(f"\n3. replay ({load_note()})", flush=True)
        await replay_phase(settings, registry, store, args.backlog + live, args.replay_by)
    finally:
        await store.close()


async def run(args: argparse.Namespace, work: Path) -> None:
    dsn = f"chdb://{work / 'chdb'}"
    corpus = Corpus(seed=args.seed, vocabulary=args.vocabulary)
    if not args.skip_search:
        await search_part(dsn, corpus, args)
    if not args.skip_projection:
        port = free_port()
        broker = services.broker_process(work, port)
        broker.start()
        try:
            await projection_part(
                dsn, Corpus(seed=args.seed + 100, vocabulary=args.vocabulary), f"127.0.0.1:{port}", work, args
            )
        finally:
            with contextlib.suppress(Exception):
                broker.stop()
    print(f"\ndone ({load_note()})", flush=True)


FAILURES: list[str] = []
"""Wrong results seen by the phases (a count that differs from what was produced): the bench then
exits non-zero after printing its figures."""


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=1_000_000, help="rows in the search table")
    parser.add_argument(
        "--backlog",
        type=int,
        default=None,
        help="records of the projection backlog (default messages/5, at most 200,000)",
    )
    parser.add_argument("--accounts", type=int, default=100)
    parser.add_argument("--agents", type=int, default=5, help="agents per account")
    parser.add_argument("--users", type=int, default=50, help="users per agent at most")
    parser.add_argument("--vocabulary", type=int, default=4000, help="distinct words")
    parser.add_argument("--insert-batch", type=int, default=100_000, help="rows per insert (search table)")
    parser.add_argument("--queries", type=int, default=300, help="timed searches per scope")
    parser.add_argument("--warmup", type=int, default=30, help="untimed searches per scope first")
    parser.add_argument(
        "--rates",
        type=lambda text: [int(r) for r in text.split(",")],
        default=[1000, 3000],
        help="live phases: messages/s, comma-separated (one phase each)",
    )
    parser.add_argument("--live-seconds", type=float, default=30.0, help="live phase duration")
    parser.add_argument("--poll-ms", type=float, default=20.0, help="live phase: ClickHouse poll interval")
    parser.add_argument(
        "--timeout", type=float, default=900.0, help="give up a phase after this many seconds"
    )
    parser.add_argument(
        "--replay-by",
        choices=("new-group", "reset"),
        default="new-group",
        help="replay on a new consumer group, or reset the processor's group (refused by Tansu)",
    )
    parser.add_argument("--no-optimize", action="store_true", help="skip the searches after OPTIMIZE FINAL")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--skip-search", action="store_true")
    parser.add_argument("--skip-projection", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep the temp directory")
    args = parser.parse_args()
    if args.backlog is None:
        args.backlog = min(200_000, args.messages // 5)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    work = Path(tempfile.mkdtemp(prefix="memstream-bench-transcripts-", dir="/tmp"))
    print(f"transcript bench: data in {work} ({load_note()})", flush=True)
    started = time.monotonic()
    try:
        asyncio.run(run(args, work))
    finally:
        print(f"total {time.monotonic() - started:.0f} s", flush=True)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    if FAILURES:
        sys.exit("bench_transcripts: wrong results: " + "; ".join(FAILURES))


if __name__ == "__main__":
    main()
