"""Issue 15's proof: three `memstream node` processes with the shard membership on, one broker, one
Postgres, one Redis, one journal directory (six shards), node 1 hosting the embedded projections.

Writers append to many threads through every node at once with the retrying client
(`memstream.client`: 503 and network errors retried, the same message ids each time) while node 3 is
killed with SIGKILL (no handover: its leases run out). Then:
- node 3's shards are owned by the live nodes within seconds (the lease TTL and a round);
- every acknowledged append is in its thread exactly once (read through a live node), offsets dense,
  each message in the thread's shard, and every context is the thread's own (its latest messages
  in order, after a summary of its own earlier ones once the nodes' thread-memory processors
  compacted it);
- the ClickHouse projection (node 1) holds every message of the journal once, with its shard and seq.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.config import Settings
from core.sharding.shards import shard_of
from memstream.client import MemstreamClient, RetryPolicy
from memstream.embedded.bootstrap import create_key
from sinks.postgres.pool import create_pool
from sinks.postgres.progress import PostgresProgress
from streams.runtime.processor import group_id
from tests.memstream.cluster import Cluster

SHARDS = 6
THREADS = 36
ACCOUNT = "acme"
SUMMARY = "Previous conversation summary:"
RETRY = RetryPolicy(max_attempts=40, initial_backoff_s=0.1, max_backoff_s=1.0, max_elapsed_s=20)


@pytest.fixture
def cluster(settings: Settings, tmp_path: Path) -> Iterator[Cluster]:
    cluster = Cluster(settings.model_copy(update={"journal_shards": SHARDS}), tmp_path)
    cluster.add("n1", projections=True)
    cluster.add("n2")
    cluster.add("n3")
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


class Writer(threading.Thread):
    """Appends turns of 2 messages to its threads through one node until stopped; keeps what was
    acknowledged (thread -> message ids in order) and the first error that was not retried away."""

    def __init__(self, url: str, key: str, threads: list[str]) -> None:
        super().__init__(daemon=True)
        self.client = MemstreamClient(url, key, retry=RETRY, timeout=10)
        self.threads = threads
        self.acked: dict[str, list[str]] = defaultdict(list)
        self.turns = 0
        self.error: BaseException | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                thread = self.threads[self.turns % len(self.threads)]
                n = len(self.acked[thread])
                messages = [
                    {"message_id": f"{thread}-{n + i}", "role": role, "content": f"{thread} turn {n + i}"}
                    for i, role in enumerate(("user", "assistant"))
                ]
                stored = self.client.append(thread, messages, agent_id="bot", user_id="u")
                assert [m.message_id for m in stored.messages] == [m["message_id"] for m in messages]
                self.acked[thread] += [m["message_id"] for m in messages]
                self.turns += 1
        except BaseException as exc:
            self.error = exc
        finally:
            self.client.close()


def check_context(context: list[str], thread: str, messages: list[dict[str, object]]) -> None:
    """The context of `thread` is its latest messages in order, after a summary of its own earlier
    messages once the nodes' thread-memory processors compacted it (long threads)."""
    contents = [str(m["content"]) for m in messages]
    rest = context
    if context and context[0].startswith(SUMMARY):
        mentioned = set(re.findall(r"(th-\d+) turn", context[0]))
        assert mentioned == {thread}, f"{thread}'s summary mentions {mentioned}"
        rest = context[1:]
    assert rest, f"{thread}: no messages in the context"
    assert rest == contents[len(contents) - len(rest) :], f"{thread}: the context's messages"


def wait_for_projection(settings: Settings, up_to: dict[int, int], timeout_s: float = 60) -> None:
    """Until the ClickHouse projection's stored progress of each shard reached `up_to[shard]`."""

    async def low() -> dict[int, int]:
        pool = await create_pool(settings.postgres, min_size=1, max_size=1)
        try:
            progress = PostgresProgress(pool)
            groups = [group_id("clickhouse-projection", settings)]
            topic = settings.topic("journal.messages")
            return {k: await progress.low_watermark(groups, topic, k) for k in up_to}
        finally:
            await pool.close()

    deadline = time.monotonic() + timeout_s
    while any(found[k] < up_to[k] for k in up_to if (found := asyncio.run(low()))):
        assert time.monotonic() < deadline, f"projection at {found}, wanted {up_to}"
        time.sleep(0.5)


def projected(settings: Settings, data_dir: Path) -> list[tuple[str, int, int, int]]:
    """(thread, offset, shard, seq) of every row of the ClickHouse projection of node 1 (stopped),
    merged (FINAL), read by a process of its own."""
    script = (
        "import json, sys, clickhouse_connect\n"
        "client = clickhouse_connect.get_client(dsn=sys.argv[1])\n"
        "print(json.dumps([list(row) for row in client.query(sys.argv[2]).result_rows]))\n"
    )
    sql = (
        f"SELECT thread_id, offset, shard, seq FROM {settings.clickhouse_database}.messages FINAL "
        f"WHERE account_id = '{ACCOUNT}' ORDER BY thread_id, offset"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, f"chdb://{data_dir / 'clickhouse'}", sql],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return [tuple(row) for row in json.loads(done.stdout.strip().splitlines()[-1])]


def test_three_nodes_lose_one_and_keep_every_acknowledged_append(
    cluster: Cluster, settings: Settings
) -> None:
    key = asyncio.run(create_key(settings, ACCOUNT))
    n1, n2, n3 = cluster.nodes
    owners = cluster.wait_for_owners(SHARDS, among={"n1", "n2", "n3"})
    assert sorted(owners.values()) == ["n1", "n1", "n2", "n2", "n3", "n3"], owners
    threads = [f"th-{i}" for i in range(THREADS)]
    writers = [Writer(node.url, key, threads[i::3]) for i, node in enumerate(cluster.nodes)]
    for writer in writers:
        writer.start()
    time.sleep(6)  # every node writes, and forwards to the others

    os.kill(n3.process.pid or 0, signal.SIGKILL)
    killed_at = time.monotonic()
    writers[2].stop.set()  # its node is gone: its threads go on through the others
    taken = cluster.wait_for_owners(SHARDS, among={"n1", "n2"}, timeout_s=20)
    takeover_s = time.monotonic() - killed_at
    assert sorted(taken.values()) == ["n1", "n1", "n1", "n2", "n2", "n2"], taken
    assert takeover_s < 12, f"node 3's shards taken after {takeover_s:.1f} s"
    writers[2].join(RETRY.max_elapsed_s + 15)  # its last append fails once its retries run out
    assert not writers[2].is_alive()
    writers.append(moved := Writer(n1.url, key, threads[2::3]))
    for thread, ids in writers[2].acked.items():
        moved.acked[thread] = list(ids)  # goes on where the acknowledged appends stopped
    moved.start()
    time.sleep(6)  # appends go on after the takeover
    for writer in writers:
        writer.stop.set()
        writer.join(60)
    for writer in writers:
        assert writer.error is None or writer is writers[2], repr(writer.error)

    acked: dict[str, list[str]] = defaultdict(list)
    for writer in [*writers[:2], moved]:
        for thread, ids in writer.acked.items():
            acked[thread] = ids if len(ids) > len(acked[thread]) else acked[thread]
    assert sum(len(ids) for ids in acked.values()) > 100 and len(acked) == THREADS

    journal: dict[str, list[dict[str, object]]] = {}
    with MemstreamClient(n2.url, key, retry=RETRY) as client:
        for thread in threads:
            page = client.read_messages(thread, limit=1000)
            messages = [m.model_dump() for m in page.messages]
            journal[thread] = messages
            ids = [str(m["message_id"]) for m in messages]
            assert len(ids) == len(set(ids)), f"{thread}: a message twice"
            assert ids[: len(acked[thread])] == acked[thread], thread  # every acknowledged one, in order
            assert len(ids) - len(acked[thread]) <= 2, thread  # at most the turn in flight at the kill
            assert [m["offset"] for m in messages] == list(range(len(messages)))
            assert {m["shard"] for m in messages} == {shard_of(settings.environment, ACCOUNT, thread, SHARDS)}
            check_context([m.content or "" for m in client.get_context(thread).messages], thread, messages)

    up_to: dict[int, int] = defaultdict(int)
    for messages in journal.values():
        for m in messages:
            up_to[int(str(m["shard"]))] = max(up_to[int(str(m["shard"]))], int(str(m["seq"])))
    wait_for_projection(settings, dict(up_to))
    cluster.stop()
    rows = projected(settings, cluster.tmp_path / "n1")
    expected = sorted(
        (thread, int(str(m["offset"])), int(str(m["shard"])), int(str(m["seq"])))
        for thread, messages in journal.items()
        for m in messages
    )
    assert sorted(rows) == expected
