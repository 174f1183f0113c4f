"""Benchmark of the memory vector index: hybrid query latency on Qdrant Edge, embedding included.

    .venv/bin/python bench/bench_recall_index.py                    # 100,000 points (about 5 min)
    .venv/bin/python bench/bench_recall_index.py --points 20000 --queries 300

1. Embedding: `--points` synthetic memory entries (one-sentence facts from a few hundred words,
   like agent memories) are embedded with the offline MiniLM (`OfflineMiniLM`, batches of
   `--batch`) and BM25-encoded; throughput in texts/s.
2. Loading: the points go into one `QdrantEdgeIndex` collection in upserts of 1,000 (each
   returns after the shard's flush, as the projection does); throughput in points/s.
3. Queries: `--queries` recall-shaped queries, one at a time: embed the query, BM25-encode it, and
   run `hybrid_query` (dense + sparse prefetches, DBSF) filtered to one agent (1/20 of the points)
   and one user (shared + that user's private entries), limit 5. Latency p50/p99 of the whole
   (embedding included) and of the index call alone; run again after `optimize()` built the HNSW
   index (the Edge shard does not optimize by itself).

One process on this 2-core machine; the shard uses one search thread and one indexing thread.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import memory_corpus
from figures import pct
from memory_corpus import OBJECTS, VERBS

from core.stores.vectors import CollectionRef, IndexFilter, IndexPoint
from sinks.embeddings.bm25 import Bm25Sparse
from sinks.embeddings.minilm import OfflineMiniLM
from sinks.qdrant.edge import QdrantEdgeIndex

SUBJECTS = [
    "The user",
    "The customer",
    "Our team",
    "The project",
    "The client",
    "The manager",
    "Alice",
    "Bob",
    "The support bot",
    "The backend service",
    "The mobile app",
    "The billing system",
    "The CEO",
]
TAILS = [*memory_corpus.TAILS, ""]
AGENTS, USERS = 20, 200


def fact(rng: random.Random, i: int) -> str:
    return f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)} {rng.choice(TAILS)} (#{i})."


def ms(values: list[float]) -> str:
    return (
        f"p50 {pct(values, 0.5) * 1000:.2f} ms, p99 {pct(values, 0.99) * 1000:.2f} ms, "
        f"mean {statistics.fmean(values) * 1000:.2f} ms"
    )


async def load(
    index: QdrantEdgeIndex, ref: CollectionRef, model: OfflineMiniLM, args: argparse.Namespace
) -> None:
    rng = random.Random(7)
    sparse = Bm25Sparse()
    chunk, embed_s, upsert_s, done = 2_000, 0.0, 0.0, 0
    started = time.perf_counter()
    while done < args.points:
        n = min(chunk, args.points - done)
        texts = [fact(rng, done + k) for k in range(n)]
        t0 = time.perf_counter()
        vectors = await model.embed(texts)
        sparse_vectors = [sparse.encode_document(t) for t in texts]
        embed_s += time.perf_counter() - t0
        points = []
        for k, (dense, sv) in enumerate(zip(vectors, sparse_vectors, strict=True)):
            private = rng.random() < 0.3
            points.append(
                IndexPoint(
                    entry_id=f"e{done + k}",
                    dense=tuple(dense),
                    sparse=sv,
                    payload={
                        "agent_id": f"agent-{rng.randrange(AGENTS)}",
                        "user_id": f"user-{rng.randrange(USERS)}" if private else None,
                        "visibility": "private" if private else "shared",
                        "category": rng.choice(["user_profile", "project_fact", "observation"]),
                        "key": f"k{done + k}",
                        "importance": round(rng.random(), 2),
                        "expires_at": None,
                    },
                )
            )
        t0 = time.perf_counter()
        for start in range(0, len(points), 1_000):
            await index.upsert(ref, points[start : start + 1_000])
        upsert_s += time.perf_counter() - t0
        done += n
        elapsed = time.perf_counter() - started
        print(
            f"  {done:>7,}/{args.points:,} points  {done / embed_s:,.0f} texts/s embedded  "
            f"{elapsed:,.0f} s elapsed, ~{elapsed / done * (args.points - done):,.0f} s left",
            flush=True,
        )
    print(f"embedding: {args.points / embed_s:,.0f} texts/s (dense MiniLM + BM25, batches of {args.batch})")
    print(f"loading: {args.points / upsert_s:,.0f} points/s (upserts of 1,000, each flushed)")


async def queries(index: QdrantEdgeIndex, ref: CollectionRef, model: OfflineMiniLM, count: int) -> None:
    rng = random.Random(11)
    sparse = Bm25Sparse()
    total: list[float] = []
    index_only: list[float] = []
    hits = 0
    for _ in range(count):
        text = f"what does {rng.choice(SUBJECTS).lower()} {rng.choice(VERBS)} about {rng.choice(OBJECTS)}?"
        where = IndexFilter(agent_id=f"agent-{rng.randrange(AGENTS)}", user_id=f"user-{rng.randrange(USERS)}")
        t0 = time.perf_counter()
        (dense,) = await model.embed([text])
        sv = sparse.encode_query(text)
        t1 = time.perf_counter()
        found = await index.hybrid_query(ref, dense, sv, where, 5)
        t2 = time.perf_counter()
        total.append(t2 - t0)
        index_only.append(t2 - t1)
        hits += len(found) == 5
    print(f"  query (embed + BM25 + hybrid_query): {ms(total)}")
    print(f"  hybrid_query alone:                  {ms(index_only)}")
    print(f"  queries with 5 results: {hits}/{count}")


async def main(args: argparse.Namespace) -> None:
    root = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="bench-recall-"))
    ref = CollectionRef(environment="bench", account_id="acme", model_id="all-MiniLM-L6-v2-int8")
    model = OfflineMiniLM(batch_size=args.batch)
    t0 = time.perf_counter()
    model.load()
    print(f"model loaded in {time.perf_counter() - t0:.2f} s")
    index = QdrantEdgeIndex(root)
    try:
        existing = await index.count(ref)
        reused = existing >= args.points
        if reused:
            print(f"reusing {existing:,} points in {root}")
        else:
            print(f"loading {args.points:,} points into {root}")
            await load(index, ref, model, args)
        for _ in range(20):  # warm up
            await model.embed(["warm up"])
        state = "reused shard (optimized if a previous run did)" if reused else "fresh shard, not optimized"
        print(f"{args.queries} queries, {state}:")
        await queries(index, ref, model, args.queries)
        if not args.skip_optimize:
            t0 = time.perf_counter()
            await index.optimize(ref)
            print(f"optimize (HNSW build, 1 thread): {time.perf_counter() - t0:,.1f} s")
            print(f"{args.queries} queries, optimized shard:")
            await queries(index, ref, model, args.queries)
    finally:
        await index.close()
        if not args.dir and not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--points", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--batch", type=int, default=64, help="embedding batch size")
    parser.add_argument("--dir", help="index directory (kept; reused when it holds enough points)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary index directory")
    parser.add_argument("--skip-optimize", action="store_true")
    asyncio.run(main(parser.parse_args()))
