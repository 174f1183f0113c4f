"""Benchmark of thread compaction through a real node with the offline model (prints figures).

    .venv/bin/python bench/bench_compaction.py               # 200 threads, 30 s trickle
    .venv/bin/python bench/bench_compaction.py --quick       # 20 threads, 10 s trickle (smoke test)
    .venv/bin/python bench/bench_compaction.py --threads 500 --trickle-seconds 60

Starts its own embedded Tansu broker, PostgreSQL and Redis (free ports, temp directory, stopped and
removed at the end), creates an API key, and runs a real `memstream node` child process against
them (offline chat model, default runtime options). Everything goes through its HTTP API (httpx).
The agent has the Memory capability bound, so every compaction runs the pre-compaction flush's
fact extraction (and stores what it finds) before the summary.

Every thread gets one POST of 50 short messages (about 15 tokens each: the 50-message threshold is
the one crossed, by the POST itself); its first user message states a name and a preference, so
the flush has facts to store. A thread is "compacted" once `GET /v1/threads/{id}/context` shows
`metadata.summary_version`.

0. Warm-up: one thread compacted (consumer groups joined, connections open).
1. Throughput: `--threads` threads appended by `--clients` concurrent clients, then the pending
   threads' contexts are polled (`--clients` concurrent readers, every `--drain-poll-ms`) until
   every one has a summary: threads/s from the first append sent to the last summary seen, and the
   drain time (last append acknowledged -> last summary seen).
2. Delay: one thread crosses every `--interval` s for `--trickle-seconds` s (open loop); each
   pending thread's context is polled every `--poll-ms` ms; delay = first poll that showed the
   summary - the crossing POST's acknowledgement (so up to one poll interval late): p50/p90/p99/max.
   The offline model's own time (`summarize` with the summarizer's token budget and
   `extract_facts`, on equivalent 50-message threads, in this process) is measured separately and
   its median subtracted to give the delay excluding model time (the pipeline: journal -> relay ->
   thresholds -> flush -> summarizer -> summary store -> context reader).

Everything (Tansu, PostgreSQL, Redis, the node and this client) shares this machine; the load
average is printed before each phase.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from figures import load_note, pct
from pydantic import SecretStr
from server_group import server_group

from core.chat.offline import OfflineChatModel
from core.config import Settings
from core.journal.models import Message
from core.journal.tokens import count_tokens
from memstream.embedded import services
from memstream.embedded.bootstrap import create_key
from memstream.embedded.process import ManagedProcess, free_port
from memstream.embedded.supervisor import http_ok
from processors.summarizer import SUMMARY_MAX_TOKENS

ENVIRONMENT = "bench"
ACCOUNT = "acme"
AGENT = "bot"
MESSAGES_PER_THREAD = 50
NAMES = ["Ada", "Bruno", "Chen", "Dalia", "Emeka", "Farah", "Goran", "Hana", "Ivo", "Jun"]
LIKES = ["window seats", "green tea", "dark mode", "early flights", "quiet hotels", "vegetarian food"]
TOPICS = [
    "the flight to Lisbon",
    "the hotel booking",
    "the conference schedule",
    "the budget for the trip",
    "the visa paperwork",
    "the car rental",
    "the restaurant reservation",
    "the museum tickets",
]


def thread_messages(thread: str, n: int = MESSAGES_PER_THREAD) -> list[dict[str, Any]]:
    """The 50 messages of one thread (first: a name and a preference; then a conversation)."""
    k = sum(map(ord, thread))
    first = f"My name is {NAMES[k % len(NAMES)]}. I prefer {LIKES[k % len(LIKES)]}."
    messages: list[dict[str, Any]] = [{"message_id": f"{thread}-0", "role": "user", "content": first}]
    for i in range(1, n):
        role = "user" if i % 2 == 0 else "assistant"
        topic = TOPICS[(k + i) % len(TOPICS)]
        if role == "user":
            text = f"Can you check {topic} again? Step {i} still looks unclear to me."
        else:
            text = f"I checked {topic}: step {i} is confirmed and the details are in your inbox."
        messages.append({"message_id": f"{thread}-{i}", "role": role, "content": text})
    return messages


def journal_messages(thread: str) -> list[Message]:
    """The same thread as journal messages (what the flush and the summarizer give the model)."""
    now = datetime.now(UTC)
    return [
        Message(
            message_id=m["message_id"],
            environment=ENVIRONMENT,
            account_id=ACCOUNT,
            agent_id=AGENT,
            user_id="user-1",
            thread_id=thread,
            offset=i,
            seq=i + 1,
            role=m["role"],
            content=m["content"],
            created_at=now,
            token_count=count_tokens(m["content"]),
        )
        for i, m in enumerate(thread_messages(thread))
    ]


async def model_times(samples: int) -> tuple[float, float, int]:
    """Medians (s) of the offline summarize and extract_facts on 50-message threads; tokens/thread."""
    model = OfflineChatModel()
    summarize_s: list[float] = []
    facts_s: list[float] = []
    tokens = 0
    for i in range(samples):
        messages = journal_messages(f"model-{i}")
        tokens = sum(m.token_count for m in messages)
        t0 = time.perf_counter()
        await model.summarize(None, messages, max_tokens=SUMMARY_MAX_TOKENS)
        t1 = time.perf_counter()
        draft = await model.extract_facts(messages)
        t2 = time.perf_counter()
        assert draft.facts, "the offline rules found no fact in the first message"
        summarize_s.append(t1 - t0)
        facts_s.append(t2 - t1)
    return statistics.median(summarize_s), statistics.median(facts_s), tokens


class Bench:
    def __init__(self, http: httpx.AsyncClient, args: argparse.Namespace) -> None:
        self.http = http
        self.args = args
        self.run_id = uuid.uuid4().hex[:6]

    def thread_id(self, phase: str, i: int) -> str:
        return f"{phase}-{self.run_id}-{i:05d}"

    async def append(self, thread: str) -> float:
        """POST the thread's 50 messages; returns the monotonic time of the acknowledgement."""
        body = {"agent_id": AGENT, "user_id": f"user-{thread[-3:]}", "messages": thread_messages(thread)}
        response = await self.http.post(f"/v1/threads/{thread}/messages", json=body)
        acked = time.monotonic()
        if response.status_code != 201:
            raise RuntimeError(f"append {thread}: {response.status_code} {response.text[:300]}")
        return acked

    async def summary_version(self, thread: str) -> int | None:
        response = await self.http.get(f"/v1/threads/{thread}/context")
        if response.status_code != 200:
            raise RuntimeError(f"context {thread}: {response.status_code} {response.text[:300]}")
        version: int | None = response.json()["metadata"].get("summary_version")
        return version

    async def wait_summary(self, thread: str, poll_s: float, limit_s: float) -> float:
        """Poll until the thread's context has a summary; the monotonic time it was first seen."""
        deadline = time.monotonic() + limit_s
        while True:
            if await self.summary_version(thread):
                return time.monotonic()
            if time.monotonic() > deadline:
                raise RuntimeError(f"no summary for {thread} after {limit_s:.0f} s")
            await asyncio.sleep(poll_s)


async def warm_up(b: Bench) -> None:
    thread = b.thread_id("warm", 0)
    t0 = time.monotonic()
    acked = await b.append(thread)
    seen = await b.wait_summary(thread, 0.05, 180)
    print(
        f"warm-up: one thread compacted {(seen - acked) * 1000:.0f} ms after its append "
        f"({seen - t0:.1f} s in all)",
        flush=True,
    )


async def throughput_phase(b: Bench) -> None:
    n, clients = b.args.threads, b.args.clients
    threads = [b.thread_id("tput", i) for i in range(n)]
    print(
        f"\n1. throughput: {n} threads x {MESSAGES_PER_THREAD} messages, {clients} concurrent clients "
        f"({load_note()})",
        flush=True,
    )
    queue: asyncio.Queue[str] = asyncio.Queue()
    for t in threads:
        queue.put_nowait(t)
    acks: list[float] = []

    async def appender() -> None:
        while not queue.empty():
            acks.append(await b.append(queue.get_nowait()))

    started = time.monotonic()
    await asyncio.gather(*(appender() for _ in range(clients)))
    last_ack = max(acks)
    append_s = last_ack - started
    print(
        f"  appended in {append_s:.2f} s ({n / append_s:,.1f} threads/s, "
        f"{n * MESSAGES_PER_THREAD / append_s:,.0f} messages/s); draining ({load_note()})",
        flush=True,
    )
    pending = set(threads)
    seen_at: dict[str, float] = {}
    sem = asyncio.Semaphore(clients)
    next_report = time.monotonic() + 5
    deadline = time.monotonic() + b.args.timeout

    async def check(thread: str) -> None:
        async with sem:
            if await b.summary_version(thread):
                seen_at[thread] = time.monotonic()
                pending.discard(thread)

    while pending:
        round_start = time.monotonic()
        await asyncio.gather(*(check(t) for t in sorted(pending)))
        now = time.monotonic()
        if now >= next_report:
            print(f"  {n - len(pending):>5}/{n} summarized, {now - started:.1f} s elapsed", flush=True)
            next_report = now + 5
        if now > deadline:
            raise RuntimeError(f"{len(pending)} threads still without a summary after {b.args.timeout} s")
        await asyncio.sleep(max(0.0, b.args.drain_poll_ms / 1000 - (now - round_start)))
    last_seen = max(seen_at.values())
    total_s = last_seen - started
    print(
        f"  all {n} threads summarized: {n / total_s:,.2f} threads/s from the first append to the last "
        f"summary seen ({total_s:.2f} s); drain (last append acked -> last summary seen) "
        f"{last_seen - last_ack:.2f} s",
        flush=True,
    )


async def delay_phase(b: Bench, model_s: float) -> None:
    count = max(1, round(b.args.trickle_seconds / b.args.interval))
    poll_s = b.args.poll_ms / 1000
    print(
        f"\n2. delay: one thread crossing every {b.args.interval} s for {b.args.trickle_seconds:.0f} s "
        f"({count} threads), each pending context polled every {b.args.poll_ms:.0f} ms ({load_note()})",
        flush=True,
    )
    delays: list[float] = []

    async def one(i: int) -> None:
        thread = b.thread_id("delay", i)
        acked = await b.append(thread)
        seen = await b.wait_summary(thread, poll_s, b.args.timeout)
        delays.append(seen - acked)

    tasks: list[asyncio.Task[None]] = []
    start = time.monotonic()
    for i in range(count):
        await asyncio.sleep(max(0.0, start + i * b.args.interval - time.monotonic()))
        tasks.append(asyncio.create_task(one(i)))
    await asyncio.gather(*tasks)
    ms = [d * 1000 for d in delays]
    net = [d - model_s * 1000 for d in ms]

    def line(values: list[float]) -> str:
        return (
            f"p50 {pct(values, 0.5):7.1f}  p90 {pct(values, 0.9):7.1f}  p99 {pct(values, 0.99):7.1f}  "
            f"max {max(values):7.1f} ms"
        )

    print(
        f"  crossing append acked -> summary visible in the context ({len(ms)} threads):\n"
        f"    raw                            {line(ms)}\n"
        f"    excluding model time ({model_s * 1000:.2f} ms) {line(net)}\n"
        f"  ({load_note()})",
        flush=True,
    )


async def run(args: argparse.Namespace, base_url: str, key: str) -> None:
    summarize_s, facts_s, tokens = await model_times(args.model_samples)
    model_s = summarize_s + facts_s
    print(
        f"offline model, in this process, on a {MESSAGES_PER_THREAD}-message thread ({tokens} tokens), "
        f"medians of {args.model_samples}: summarize {summarize_s * 1000:.2f} ms (max_tokens "
        f"{SUMMARY_MAX_TOKENS}), extract_facts {facts_s * 1000:.2f} ms; model time per compaction "
        f"{model_s * 1000:.2f} ms",
        flush=True,
    )
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    async with httpx.AsyncClient(
        base_url=base_url, headers={"Authorization": f"Bearer {key}"}, timeout=60, limits=limits
    ) as http:
        response = await http.put(f"/v1/agents/{AGENT}", json={"capabilities": ["memory"]})
        response.raise_for_status()
        print(
            f"agent {AGENT!r}: Memory capability bound, so every compaction runs the flush's fact "
            f"extraction (and stores the facts) before the summary",
            flush=True,
        )
        b = Bench(http, args)
        await warm_up(b)
        await throughput_phase(b)
        await delay_phase(b, model_s)
        memory = await http.get(f"/v1/agents/{AGENT}/memory", params={"user_id": "user-000"})
        if memory.status_code == 200:
            print(f"\n(user-000's agent memory holds {len(memory.json()['entries'])} facts)", flush=True)
    print(f"\ndone ({load_note()})", flush=True)


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


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--threads", type=int, default=200, help="threads of the throughput phase")
    parser.add_argument("--quick", action="store_true", help="smoke test: 20 threads, 10 s trickle")
    parser.add_argument("--clients", type=int, default=4, help="concurrent appenders / drain readers")
    parser.add_argument("--drain-poll-ms", type=float, default=200.0, help="drain poll round interval")
    parser.add_argument("--trickle-seconds", type=float, default=30.0, help="duration of the trickle")
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between crossings")
    parser.add_argument("--poll-ms", type=float, default=20.0, help="context poll interval per thread")
    parser.add_argument("--model-samples", type=int, default=50, help="offline model timing samples")
    parser.add_argument("--timeout", type=float, default=600.0, help="give up after this many seconds")
    parser.add_argument("--keep", action="store_true", help="keep the temp directory")
    args = parser.parse_args()
    if args.quick:
        args.threads, args.trickle_seconds = 20, 10.0
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    work = Path(tempfile.mkdtemp(prefix="memstream-bench-compaction-", dir="/tmp"))
    broker_port, pg_port, redis_port, api_port = free_port(), free_port(), free_port(), free_port()
    print(
        f"compaction bench: Tansu on 127.0.0.1:{broker_port}, PostgreSQL on 127.0.0.1:{pg_port}, "
        f"Redis on 127.0.0.1:{redis_port}, node API on 127.0.0.1:{api_port}, data in {work} "
        f"({load_note()})",
        flush=True,
    )
    with server_group(work, keep=args.keep) as servers:
        try:
            for proc in (
                services.broker_process(work, broker_port),
                services.postgres_process(work, pg_port),
                services.redis_process(work, redis_port),
            ):
                servers.start(proc)
            services.ensure_database(pg_port, "bench")
            settings = Settings(
                data_dir=work / "node",
                environment=ENVIRONMENT,
                topic_prefix=f"bench{uuid.uuid4().hex[:8]}.",
                broker_url=f"kafka://127.0.0.1:{broker_port}",
                postgres_dsn=SecretStr(f"postgresql://postgres@127.0.0.1:{pg_port}/bench"),
                redis_url=SecretStr(f"redis://127.0.0.1:{redis_port}/0"),
            )
            key = asyncio.run(create_key(settings, ACCOUNT, "bench"))
            node = node_process(settings, api_port, work / "logs" / "node.log")
            t0 = time.monotonic()
            servers.start(node, timeout=180)
            print(
                f"node ready in {time.monotonic() - t0:.1f} s (log: {work / 'logs' / 'node.log'})", flush=True
            )
            asyncio.run(run(args, f"http://127.0.0.1:{api_port}", key))
        except Exception:
            for proc in servers.started:
                if proc.name == "node":
                    print(f"node log tail:\n{proc.log_tail(30)}", file=sys.stderr, flush=True)
            raise


if __name__ == "__main__":
    main()
