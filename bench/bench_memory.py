"""Benchmark of agent memory end to end: `memory_recall` over N entries, and the projection lag.

    .venv/bin/python bench/bench_memory.py                # 100,000 entries (about 15 min on 2 cores)
    .venv/bin/python bench/bench_memory.py --quick        # 5,000 entries, short phases (smoke test)
    .venv/bin/python bench/bench_memory.py --entries 20000 --queries 300

Starts its own embedded Tansu broker and PostgreSQL (free ports, temp directory, stopped and removed
at the end) and one Qdrant Edge index, one MiniLM embedder and one BM25 encoder shared by everything
in the process (as the node's `Engines` does).

1. Population (bypasses Kafka, for speed): N entries spread over agents of one account (400 per
   agent: 50 user_profile, 100 project_fact, 250 observation, within every per-agent and per-user
   capacity; 10 users per agent; 40% private, 30% shared with an author, 30% shared without one,
   but user_profile entries always private to a user;
   observations expire 30 days after a creation time spread over the last 20 days) are COPYed
   into `memory_entries` (content_hash as the service computes it), then embedded in batches and
   upserted into the account's collection with the projection's own payload; then `optimize()`
   builds the HNSW index.
2. Recall through the real `Recaller.recall` (phase 1: embed the query + BM25, hybrid Qdrant Edge
   query; phase 2: Postgres `by_ids` re-check; then the recall counters update), default limit 5,
   on recall-shaped questions from random agents (70% with one of the agent's users, 30% without):
   `--queries` sequential calls (p50/p99), the same with `--concurrency` concurrent callers
   (throughput, p50/p99), the parts alone (medians: embedding, hybrid query, `by_ids`,
   `record_recall`), and the Postgres full-text fallback: `keyword_search` alone and the whole
   `Recaller.recall` with the index down (a closed index: embedding, failed index call, full text,
   counters).
3. Projection lag, through the real pipeline: `MemoryService.store` (commits the entry and its
   outbox row) -> `EntriesOutboxRelay.run` (LISTEN/NOTIFY wake-up) -> Tansu `memory.entries` ->
   the `qdrant-projection` processor under `run_processors` (node's default runtime options:
   batches of 500 or 0.2 s) -> embedded and upserted (flushed) into the same collection. Entries
   are stored at a steady rate (open loop, 4 storing tasks over distinct agents); a poller
   retrieves the still-missing point ids every `--poll-ms`; lag = first poll that found the point -
   `store()` returned (so up to one poll interval late). The lag is split by a plain consumer
   thread reading `memory.entries` (arrival on the topic) and by noting when the processor's
   `process()` got and finished each entry's batch: outbox relay, consumer delivery (fetch + batch
   window), batch processing. Then a backlog: the relay is stopped,
   `--backlog` entries are stored (8 concurrent callers), the relay is started again and the
   collection's point count is polled until every entry is in: sustained projection throughput.

Everything (Postgres, Tansu, the model, the index, the relay, the processor, the callers) shares
this 2-core machine; the load average is printed before each phase.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
import random
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import memory_corpus
from figures import load_note, pct
from server_group import server_group
from topic_consumer import consumer_from_start

from core.config import Settings
from core.memory.checks import content_hash
from core.memory.models import OBSERVATION_TTL_DAYS, Category, MemoryEntry, MemoryScope, Visibility
from core.memory.recall import OVERFETCH, Recaller
from core.memory.service import MemoryService
from core.stores.vectors import CollectionRef, IndexFilter, IndexPoint
from memstream.embedded import services
from memstream.embedded.process import free_port
from processors.qdrant_projection import QdrantProjection, entry_payload
from sinks.embeddings.bm25 import Bm25Sparse
from sinks.embeddings.minilm import OfflineMiniLM
from sinks.postgres.memory import PostgresMemoryStore
from sinks.postgres.migrations import migrate
from sinks.postgres.pool import create_pool
from sinks.qdrant.edge import QdrantEdgeIndex
from sinks.qdrant.layout import point_id
from streams.admin import apply_topics
from streams.relays.memory_entries import EntriesOutboxRelay
from streams.runtime import run_processors
from streams.runtime.processor import Record
from streams.topics import load_topics

ENVIRONMENT = "bench"
ACCOUNT = "acme"
SLOTS_PER_AGENT = 400
USERS_PER_AGENT = 10
USER_POOL = 2_000
CATEGORY_CYCLE: tuple[Category, ...] = (
    "user_profile",
    "project_fact",
    "project_fact",
    "observation",
    "observation",
    "observation",
    "observation",
    "observation",
)
"""Slot s of an agent has category CATEGORY_CYCLE[s % 8]: 50/100/250 of 400 slots."""
COLUMNS = (
    "entry_id",
    "environment",
    "account_id",
    "agent_id",
    "user_id",
    "author_user_id",
    "key",
    "content",
    "category",
    "visibility",
    "importance",
    "content_hash",
    "expires_at",
    "created_at",
    "updated_at",
)

PEOPLE = ["The user", "Alice", "Bob", "Priya", "Chen", "Fatima", "The customer", "The manager", "Marco"]
TEAMS = [
    "The project",
    "Our team",
    "The backend service",
    "The mobile app",
    "The billing system",
    "The data pipeline",
    "The support bot",
    "The search cluster",
    "The web frontend",
]
VERBS = [
    *memory_corpus.VERBS,
    "replaced",
    "is evaluating",
    "stopped using",
    "documented",
]
OBJECTS = [
    *memory_corpus.OBJECTS,
    "TypeScript",
    "the onboarding flow",
    "feature flags",
    "the on-call rotation",
    "S3 lifecycle rules",
    "morning meetings",
    "the design system",
    "Terraform modules",
]
TAILS = [
    *memory_corpus.TAILS,
    "in the EU region",
    "when traveling",
    "",
]
EXTRAS = [
    "This was confirmed twice.",
    "Mention it before proposing alternatives.",
    "It came up in the last three conversations.",
    "The decision may be revisited next quarter.",
    "Keep answers short when this topic comes up.",
    "A ticket was opened to track it.",
]


def ms(values: Sequence[float]) -> str:
    return f"p50 {pct(values, 0.5) * 1000:7.2f} ms  p99 {pct(values, 0.99) * 1000:7.2f} ms"


def median_ms(values: Sequence[float]) -> str:
    return f"{statistics.median(values) * 1000:.2f} ms"


def agent_id(prefix: str, number: int) -> str:
    return f"{prefix}-{number:04d}"


def agent_users(number: int) -> list[str]:
    return [f"user-{(number * 13 + k) % USER_POOL:04d}" for k in range(USERS_PER_AGENT)]


@dataclass(frozen=True)
class Spec:
    """One entry to write: who writes it (`scope`) and what (`store` arguments)."""

    scope: MemoryScope
    key: str
    content: str
    category: Category
    visibility: Visibility
    importance: float
    created_at: datetime


def content_of(rng: random.Random, category: Category, serial: int) -> str:
    subject = rng.choice(TEAMS if category == "project_fact" else PEOPLE)
    text = f"{subject} {rng.choice(VERBS)} {rng.choice(OBJECTS)} {rng.choice(TAILS)}".rstrip()
    text += f" (ref {serial})."
    if rng.random() < 0.5:
        text += " " + rng.choice(EXTRAS)
    return text


def spec(rng: random.Random, prefix: str, agent_no: int, slot: int, now: datetime) -> Spec:
    """The entry in `slot` (0..399) of agent `agent_no` (see the module doc for the spread)."""
    category = CATEGORY_CYCLE[slot % len(CATEGORY_CYCLE)]
    users = agent_users(agent_no)
    draw = rng.random()
    profile = category == "user_profile"  # facts about a user need a user and are private
    user: str | None = rng.choice(users) if draw < 0.7 or profile else None
    visibility: Visibility = "private" if draw < 0.4 or profile else "shared"
    serial = agent_no * SLOTS_PER_AGENT + slot
    return Spec(
        scope=MemoryScope(
            environment=ENVIRONMENT, account_id=ACCOUNT, agent_id=agent_id(prefix, agent_no), user_id=user
        ),
        key=f"{category}.{rng.choice(OBJECTS).replace(' ', '_').lower()}.{slot}",
        content=content_of(rng, category, serial),
        category=category,
        visibility=visibility,
        importance=round(rng.random(), 2),
        created_at=now - timedelta(seconds=rng.uniform(0, 20 * 86_400)),
    )


def specs(seed: int, prefix: str, count: int, now: datetime) -> list[Spec]:
    """`count` entries over ceil(count / 400) agents, interleaved (entry g: agent g % A, slot g // A)."""
    rng = random.Random(seed)
    agents = max(1, math.ceil(count / SLOTS_PER_AGENT))
    return [spec(rng, prefix, g % agents, g // agents, now) for g in range(count)]


def entry_of(s: Spec) -> MemoryEntry:
    expires = s.created_at + timedelta(days=OBSERVATION_TTL_DAYS) if s.category == "observation" else None
    return MemoryEntry(
        entry_id=str(uuid.uuid4()),
        environment=s.scope.environment,
        account_id=s.scope.account_id,
        agent_id=s.scope.agent_id,
        user_id=s.scope.user_id if s.visibility == "private" else None,
        author_user_id=s.scope.user_id,
        key=s.key,
        content=s.content,
        category=s.category,
        visibility=s.visibility,
        importance=s.importance,
        content_hash=content_hash(s.content),
        expires_at=expires,
        created_at=s.created_at,
        updated_at=s.created_at,
    )


def row_of(e: MemoryEntry) -> tuple[object, ...]:
    return (
        uuid.UUID(e.entry_id),
        e.environment,
        e.account_id,
        e.agent_id,
        e.user_id,
        e.author_user_id,
        e.key,
        e.content,
        e.category,
        e.visibility,
        e.importance,
        e.content_hash,
        e.expires_at,
        e.created_at,
        e.updated_at,
    )


class ProbedEdgeIndex(QdrantEdgeIndex):
    """The Edge index with a cheap presence probe (retrieve by point id, no payload or vector)."""

    async def present(self, collection: CollectionRef, entry_ids: Iterable[str]) -> set[str]:
        by_point = {point_id(e): e for e in entry_ids}
        if not by_point:
            return set()
        found = await self._call(
            collection, lambda shard: shard.retrieve(list(by_point), False, False), create_dims=None
        )
        return {by_point[str(record.id)] for record in found or ()}


@dataclass
class Bench:
    args: argparse.Namespace
    pool: asyncpg.Pool
    service: MemoryService
    index: ProbedEdgeIndex
    embedder: OfflineMiniLM
    sparse: Bm25Sparse
    ref: CollectionRef
    agents: int = 0


# ---- 1. population ---------------------------------------------------------------------------------


async def populate(b: Bench) -> None:
    n = b.args.entries
    now = datetime.now(UTC)
    print(
        f"populating {n:,} entries over {math.ceil(n / SLOTS_PER_AGENT)} agents ({load_note()})", flush=True
    )
    all_specs = specs(7, "agent", n, now)
    b.agents = max(1, math.ceil(n / SLOTS_PER_AGENT))
    chunk = 2_000
    copy_s = embed_s = upsert_s = 0.0
    started = time.perf_counter()
    for start in range(0, n, chunk):
        entries = [entry_of(s) for s in all_specs[start : start + chunk]]
        t0 = time.perf_counter()
        async with b.pool.acquire() as conn:
            await conn.copy_records_to_table(
                "memory_entries", records=[row_of(e) for e in entries], columns=COLUMNS
            )
        t1 = time.perf_counter()
        vectors = await b.embedder.embed([e.content for e in entries])
        points = [
            IndexPoint(
                entry_id=e.entry_id,
                dense=tuple(dense),
                sparse=b.sparse.encode_document(e.content),
                payload=entry_payload(e),
            )
            for e, dense in zip(entries, vectors, strict=True)
        ]
        t2 = time.perf_counter()
        for k in range(0, len(points), 1_000):
            await b.index.upsert(b.ref, points[k : k + 1_000])
        t3 = time.perf_counter()
        copy_s, embed_s, upsert_s = copy_s + t1 - t0, embed_s + t2 - t1, upsert_s + t3 - t2
        done = start + len(entries)
        elapsed = t3 - started
        print(
            f"  {done:>7,}/{n:,}  COPY {done / copy_s:,.0f} rows/s  embed {done / embed_s:,.0f} texts/s  "
            f"upsert {done / upsert_s:,.0f} points/s  {elapsed:,.0f} s elapsed, "
            f"~{elapsed / done * (n - done):,.0f} s left",
            flush=True,
        )
    t0 = time.perf_counter()
    await b.pool.execute("ANALYZE memory_entries")
    analyze_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    await b.index.optimize(b.ref)
    optimize_s = time.perf_counter() - t0
    rows = await b.pool.fetchval("SELECT count(*) FROM memory_entries")
    in_index = await b.index.count(b.ref)
    print(
        f"population: {rows:,} rows, {in_index:,} points in {time.perf_counter() - started:,.0f} s "
        f"(COPY {n / copy_s:,.0f} rows/s, embedding {n / embed_s:,.0f} texts/s, "
        f"upsert {n / upsert_s:,.0f} points/s, ANALYZE {analyze_s:.1f} s, optimize {optimize_s:,.1f} s)",
        flush=True,
    )


# ---- 2. recall -------------------------------------------------------------------------------------


def queries(seed: int, count: int, agents: int) -> list[tuple[MemoryScope, str]]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        number = rng.randrange(agents)
        user = rng.choice(agent_users(number)) if rng.random() < 0.7 else None
        scope = MemoryScope(
            environment=ENVIRONMENT, account_id=ACCOUNT, agent_id=agent_id("agent", number), user_id=user
        )
        subject = rng.choice(PEOPLE + TEAMS).lower()
        text = rng.choice(
            [
                f"what does {subject} {rng.choice(VERBS)} about {rng.choice(OBJECTS)}?",
                f"anything about {rng.choice(OBJECTS)} {rng.choice(TAILS)}?",
                f"does {subject} like {rng.choice(OBJECTS)}",
            ]
        )
        out.append((scope, text))
    return out


async def recall_bench(b: Bench) -> None:
    recaller = Recaller(b.service, b.embedder, b.sparse, b.index, model_id=b.embedder.model_id)
    for scope, text in queries(3, 20, b.agents):  # warm up
        await recaller.recall(scope, text)
    workload = queries(11, b.args.queries, b.agents)
    print(
        f"\nrecall: {len(workload)} queries, limit 5, {b.args.entries:,} entries ({load_note()})", flush=True
    )

    latencies: list[float] = []
    paths: dict[str, int] = {}
    hits = 0
    for scope, text in workload:
        t0 = time.perf_counter()
        result = await recaller.recall(scope, text)
        latencies.append(time.perf_counter() - t0)
        paths[result.path] = paths.get(result.path, 0) + 1
        hits += len(result.hits)
    print(
        f"  memory_recall sequential:             {ms(latencies)}  "
        f"(paths {paths}, {hits / len(workload):.1f} hits/query)",
        flush=True,
    )

    parts: dict[str, list[float]] = {"embed": [], "hybrid": [], "by_ids": [], "record": []}
    for scope, text in workload:
        where = IndexFilter(agent_id=scope.agent_id, user_id=scope.user_id)
        t0 = time.perf_counter()
        (dense,) = await b.embedder.embed([text])
        sv = b.sparse.encode_query(text)
        t1 = time.perf_counter()
        scored = await b.index.hybrid_query(b.ref, dense, sv, where, 5 * OVERFETCH)
        t2 = time.perf_counter()
        entries = await b.service.by_ids(scope, [s.entry_id for s in scored])
        t3 = time.perf_counter()
        await b.service.record_recall(scope, [e.entry_id for e in entries[:5]])
        t4 = time.perf_counter()
        for name, value in zip(parts, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
            parts[name].append(value)
    print(
        "  breakdown (medians): embedding (MiniLM + BM25) "
        f"{median_ms(parts['embed'])}, hybrid query {median_ms(parts['hybrid'])}, "
        f"Postgres by_ids {median_ms(parts['by_ids'])}, record_recall {median_ms(parts['record'])}",
        flush=True,
    )

    concurrent = queries(13, b.args.queries, b.agents)
    lat_c: list[float] = []

    async def caller(items: Iterable[tuple[MemoryScope, str]]) -> None:
        for scope, text in items:
            t0 = time.perf_counter()
            await recaller.recall(scope, text)
            lat_c.append(time.perf_counter() - t0)

    shared = iter(concurrent)
    t0 = time.perf_counter()
    await asyncio.gather(*(caller(shared) for _ in range(b.args.concurrency)))
    wall = time.perf_counter() - t0
    print(
        f"  memory_recall {b.args.concurrency} concurrent callers:    {ms(lat_c)}  "
        f"throughput {len(concurrent) / wall:,.0f} recalls/s",
        flush=True,
    )

    fts: list[float] = []
    found = 0
    for scope, text in workload:
        t0 = time.perf_counter()
        scored_rows = await b.service.keyword_search(scope, text, limit=5)
        fts.append(time.perf_counter() - t0)
        found += bool(scored_rows)
    print(
        f"  Postgres full-text keyword_search:    {ms(fts)}  ({found}/{len(workload)} queries matched)",
        flush=True,
    )
    down = QdrantEdgeIndex(Path(b.args.work) / "down")
    await down.close()  # a closed index: every call raises IndexUnavailable, as when Qdrant is down
    fallback = Recaller(b.service, b.embedder, b.sparse, down, model_id=b.embedder.model_id)
    recall_log = logging.getLogger("memstream.memory.recall")
    level = recall_log.level
    recall_log.setLevel(logging.ERROR)  # one warning per fallback otherwise
    lat_f: list[float] = []
    paths = {}
    try:
        for scope, text in workload:
            t0 = time.perf_counter()
            result = await fallback.recall(scope, text)
            lat_f.append(time.perf_counter() - t0)
            paths[result.path] = paths.get(result.path, 0) + 1
    finally:
        recall_log.setLevel(level)
    print(f"  memory_recall with the index down:    {ms(lat_f)}  (paths {paths})", flush=True)


# ---- 3. projection lag -------------------------------------------------------------------------------


async def store(service: MemoryService, s: Spec) -> str:
    result = await service.store(
        s.scope, s.key, s.content, s.category, scope_visibility=s.visibility, importance=s.importance
    )
    return result.entry.entry_id


class Collector(threading.Thread):
    """Reads memory.entries (its own thread, every partition, from the start): arrival time per entry id.

    Only splits the lag into relay (store -> on the topic) and projection (topic -> in the index);
    the processor does not depend on it."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(daemon=True)
        self.settings = settings
        self.arrived: dict[str, float] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        consumer = consumer_from_start(self.settings, "memory.entries")
        try:
            while not self.stop.is_set():
                for record in consumer.consume(500, 0.002):  # returns after 2 ms with what arrived
                    key = record.key()
                    if record.error() is None and key is not None:
                        now = time.perf_counter()
                        self.arrived.setdefault(key.decode().rpartition("/")[2], now)
        finally:
            consumer.close()


class TimedProjection(QdrantProjection):
    """The projection processor, unchanged, noting when each entry's batch started and finished."""

    def __init__(self, index: ProbedEdgeIndex, embedder: OfflineMiniLM, sparse: Bm25Sparse) -> None:
        super().__init__(index, embedder, sparse, close_index=False)
        self.handled: dict[str, tuple[float, float]] = {}
        self.batches: list[int] = []

    async def process(self, batch: Sequence[Record]) -> None:
        t0 = time.perf_counter()
        await super().process(batch)
        t1 = time.perf_counter()
        self.batches.append(len(batch))
        for record in batch:
            if record.key is not None:
                self.handled.setdefault(record.key.decode().rpartition("/")[2], (t0, t1))


class Pipeline:
    """The outbox relay and the projection processor running in this loop."""

    def __init__(self, b: Bench, settings: Settings) -> None:
        self.b = b
        self.settings = settings
        self.relay = EntriesOutboxRelay(b.pool, settings)
        self.stop = asyncio.Event()
        self.relay_stop = asyncio.Event()
        self.started = asyncio.Event()
        self.projection = TimedProjection(b.index, b.embedder, b.sparse)
        self.processors = asyncio.create_task(
            run_processors([self.projection], settings, self.stop, started=self.started)
        )
        self.relay_task = asyncio.create_task(self.relay.run(self.relay_stop))
        self.collector = Collector(settings)
        self.collector.start()

    async def wait_started(self, within_s: float = 60.0) -> None:
        deadline = time.monotonic() + within_s
        while not self.started.is_set():
            if self.processors.done():
                self.processors.result()
                raise RuntimeError("the processors stopped before joining their group")
            if time.monotonic() > deadline:
                raise RuntimeError("the projection did not join its consumer group in time")
            await asyncio.sleep(0.05)

    async def stop_relay(self) -> None:
        self.relay_stop.set()
        await self.relay_task

    def start_relay(self) -> None:
        self.relay_stop = asyncio.Event()
        self.relay_task = asyncio.create_task(self.relay.run(self.relay_stop))

    async def close(self) -> None:
        self.relay_stop.set()
        self.stop.set()
        await asyncio.gather(self.relay_task, self.processors, return_exceptions=True)
        await self.relay.close()
        self.collector.stop.set()
        await asyncio.to_thread(self.collector.join)


async def until_present(
    b: Bench,
    stored: dict[str, float],
    present: dict[str, float],
    storing: Callable[[], bool],
    poll_s: float,
    grace_s: float,
) -> None:
    """Poll the index for stored ids not seen yet, recording when each was first found."""
    deadline: float | None = None
    while True:
        pending = stored.keys() - present.keys()
        if pending:
            found = await b.index.present(b.ref, pending)
            now = time.perf_counter()
            for entry_id in found:
                present[entry_id] = now
        elif not storing():
            return
        if not storing():
            deadline = deadline or time.monotonic() + grace_s
            if time.monotonic() > deadline:
                return
        await asyncio.sleep(poll_s)


async def rate_phase(
    b: Bench, pipeline: Pipeline, items: list[Spec], rate: float, storers: int, label: str = ""
) -> None:
    stored: dict[str, float] = {}
    present: dict[str, float] = {}
    store_lat: list[float] = []
    pending_storers = storers

    async def storer(w: int, start: float) -> None:
        nonlocal pending_storers
        try:
            for i in range(w, len(items), storers):
                delay = start + i / rate - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                t0 = time.perf_counter()
                entry_id = await store(b.service, items[i])
                t1 = time.perf_counter()
                stored[entry_id] = t1
                store_lat.append(t1 - t0)
        finally:
            pending_storers -= 1

    batches_before = len(pipeline.projection.batches)
    start = time.perf_counter()
    poller = asyncio.create_task(
        until_present(b, stored, present, lambda: pending_storers > 0, b.args.poll_ms / 1000, 120.0)
    )
    await asyncio.gather(*(storer(w, start) for w in range(storers)))
    store_s = time.perf_counter() - start
    await poller
    lags = [present[e] - t for e, t in stored.items() if e in present]
    missing = len(stored) - len(lags)
    arrived = pipeline.collector.arrived
    handled = pipeline.projection.handled
    relay = [arrived[e] - t for e, t in stored.items() if e in arrived]
    delivery = [handled[e][0] - arrived[e] for e in stored if e in handled and e in arrived]
    processing = [handled[e][1] - handled[e][0] for e in stored if e in handled]
    sizes = pipeline.projection.batches[batches_before:]
    print(
        f"  {label}{rate:.0f}/s for {store_s:.1f} s, {len(stored)} entries: lag store() -> in the index "
        f"p50 {pct(lags, 0.5) * 1000:.0f} ms  p90 {pct(lags, 0.9) * 1000:.0f} ms  "
        f"p99 {pct(lags, 0.99) * 1000:.0f} ms  max {max(lags) * 1000:.0f} ms"
        + (f"  !! {missing} not in the index after 120 s" if missing else "")
        + f"\n      store() -> on the topic (outbox relay): {ms(relay)}\n"
        f"      on the topic -> batch handed to the processor (consumer fetch + batch window): "
        f"{ms(delivery)}\n"
        f"      batch processing (embed + BM25 + upsert + flush): {ms(processing)} "
        f"({len(sizes)} batches, mean {statistics.fmean(sizes) if sizes else 0:.1f} records)\n"
        f"      store() itself: {ms(store_lat)}",
        flush=True,
    )


async def backlog_phase(b: Bench, pipeline: Pipeline, items: list[Spec]) -> None:
    await pipeline.stop_relay()
    before = await b.index.count(b.ref)
    queue = iter(items)
    t0 = time.perf_counter()

    stored: list[str] = []

    async def storer() -> None:
        for s in queue:
            stored.append(await store(b.service, s))

    await asyncio.gather(*(storer() for _ in range(b.args.concurrency)))
    store_s = time.perf_counter() - t0
    outbox = await pipeline.relay.pending()
    target = before + len(items)
    batches_before = len(pipeline.projection.batches)
    samples: list[tuple[float, int]] = []
    t0 = time.perf_counter()
    pipeline.start_relay()
    deadline = time.monotonic() + 600
    count = before
    while count < target and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
        count = await b.index.count(b.ref)
        samples.append((time.perf_counter() - t0, count - before))
    total_s = samples[-1][0]
    done = samples[-1][1]
    first = next((t for t, c in samples if c > 0), total_s)
    lo = next((t, c) for t, c in samples if c >= 0.1 * len(items))
    hi = next(((t, c) for t, c in samples if c >= 0.9 * len(items)), samples[-1])
    steady = (hi[1] - lo[1]) / (hi[0] - lo[0]) if hi[0] > lo[0] else float("nan")
    sizes = pipeline.projection.batches[batches_before:]
    ids = set(pipeline.projection.handled) & set(stored)
    busy = sum(t1 - t0 for t0, t1 in {pipeline.projection.handled[e] for e in ids})
    print(
        f"  backlog {len(items):,} entries (stored in {store_s:.1f} s = {len(items) / store_s:,.0f}/s by "
        f"{b.args.concurrency} callers with the relay stopped, {outbox:,} outbox rows):\n"
        f"    relay started -> all {done:,} in the index in {total_s:.1f} s = "
        f"{done / total_s:,.0f} entries/s (first point after {first * 1000:.0f} ms; "
        f"steady 10%->90%: {steady:,.0f} entries/s)\n"
        f"    processor: {len(sizes)} batches, mean {statistics.fmean(sizes) if sizes else 0:.0f} records, "
        f"{busy:.1f} s inside process() (embed + BM25 + upsert + flush)"
        + (f"  !! only {done} of {len(items)} after 600 s" if done < len(items) else ""),
        flush=True,
    )


async def projection_bench(b: Bench, bootstrap: str) -> None:
    settings = Settings(
        data_dir=Path(b.args.work) / "node",
        environment=ENVIRONMENT,
        topic_prefix=f"bench{uuid.uuid4().hex[:8]}.",
        broker_url=f"kafka://{bootstrap}",
    )
    await asyncio.to_thread(apply_topics, settings, load_topics())
    rates = [float(r) for r in b.args.rates.split(",")]
    per_rate = [round(r * b.args.rate_seconds) for r in rates]
    warmup = 20
    all_specs = specs(23, "lagagent", warmup + sum(per_rate) + b.args.backlog, datetime.now(UTC))
    print(
        f"\nprojection lag: store() -> outbox relay -> Tansu -> qdrant-projection -> index "
        f"({await b.index.count(b.ref):,} points already; poll every {b.args.poll_ms} ms; {load_note()})",
        flush=True,
    )
    pipeline = Pipeline(b, settings)
    try:
        t0 = time.perf_counter()
        await pipeline.wait_started()
        print(f"  projection joined its consumer group in {time.perf_counter() - t0:.1f} s", flush=True)
        await rate_phase(b, pipeline, all_specs[:warmup], 10, 1, "warm-up ")
        offset = warmup
        for rate, count in zip(rates, per_rate, strict=True):
            print(f"  ({load_note()})", flush=True)
            await rate_phase(b, pipeline, all_specs[offset : offset + count], rate, 4)
            offset += count
        print(f"  ({load_note()})", flush=True)
        await backlog_phase(b, pipeline, all_specs[offset : offset + b.args.backlog])
    finally:
        await pipeline.close()


# ---- main ------------------------------------------------------------------------------------------


async def run(args: argparse.Namespace, bootstrap: str, dsn: str) -> None:
    pool = await create_pool(dsn, max_size=20)
    index = ProbedEdgeIndex(Path(args.work) / "qdrant")
    embedder = OfflineMiniLM()
    try:
        await migrate(pool)
        t0 = time.perf_counter()
        embedder.load()
        print(f"model loaded in {time.perf_counter() - t0:.2f} s", flush=True)
        b = Bench(
            args=args,
            pool=pool,
            service=MemoryService(PostgresMemoryStore(pool)),
            index=index,
            embedder=embedder,
            sparse=Bm25Sparse(),
            ref=CollectionRef(environment=ENVIRONMENT, account_id=ACCOUNT, model_id=embedder.model_id),
        )
        await populate(b)
        await recall_bench(b)
        await projection_bench(b, bootstrap)
        print(f"\ndone ({load_note()})", flush=True)
    finally:
        await index.close()
        await pool.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--entries", type=int, default=100_000, help="entries populated for recall")
    parser.add_argument("--quick", action="store_true", help="smoke test: 5,000 entries, short phases")
    parser.add_argument("--queries", type=int, default=500, help="recall queries per measurement")
    parser.add_argument("--concurrency", type=int, default=8, help="concurrent callers (recall, backlog)")
    parser.add_argument("--rates", default="20,100", help="steady store rates, entries/s (comma-separated)")
    parser.add_argument("--rate-seconds", type=float, default=30.0, help="duration of each steady rate")
    parser.add_argument("--backlog", type=int, default=5_000, help="entries of the backlog phase")
    parser.add_argument("--poll-ms", type=float, default=10.0, help="index presence poll interval")
    parser.add_argument("--keep", action="store_true", help="keep the temp directory")
    args = parser.parse_args()
    if args.quick:
        args.entries, args.queries, args.rate_seconds, args.backlog = 5_000, 200, 8.0, 1_000
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    args.work = tempfile.mkdtemp(prefix="memstream-bench-memory-", dir="/tmp")
    work = Path(args.work)
    broker_port, pg_port = free_port(), free_port()
    procs = [services.broker_process(work, broker_port), services.postgres_process(work, pg_port)]
    print(
        f"memory bench: {args.entries:,} entries, Tansu on 127.0.0.1:{broker_port}, "
        f"PostgreSQL on 127.0.0.1:{pg_port}, data in {work} ({load_note()})",
        flush=True,
    )
    with server_group(work, keep=args.keep) as servers:
        for proc in procs:
            servers.start(proc)
        services.ensure_database(pg_port, "bench")
        dsn = f"postgresql://postgres@127.0.0.1:{pg_port}/bench"
        asyncio.run(run(args, f"127.0.0.1:{broker_port}", dsn))


if __name__ == "__main__":
    main()
