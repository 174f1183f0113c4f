"""A node with three journal shards (`MEMSTREAM_JOURNAL_SHARDS=3`), end to end on real processes:
a `memstream node` (API, the shards' writers and relays, the projections) and a `memstream worker`
with the thread-memory processors reading per-shard views, on a Tansu broker of the test's own,
real Postgres and Redis.

- appends to 60 threads through the API land in the shard `shard_of` names, each shard numbering
  its own seqs without a gap; every context is the thread's own messages;
- a thread crossing the threshold gets its summary (thresholds, flush and summarizer in the worker);
- `memstream verify` is clean, and after the node stopped the ClickHouse projection holds every
  message once with its shard and seq;
- `memstream rebuild clickhouse` reads every shard's seqs (each republished from seq 1 first);
- the broker restarts (every topic and group lost): each shard is republished from its own
  checkpoint, only what the processors lacked (the appends made after the restart);
- a start with another shard count is refused, saying resharding is not supported.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from core.config import Settings
from core.sharding.shards import shard_of
from memstream.cli import main
from memstream.embedded.bootstrap import create_key
from memstream.embedded.process import ManagedProcess, ServiceError, free_port
from memstream.wiring.processors import consumers_of
from sinks.postgres.pool import create_pool
from sinks.postgres.progress import PostgresProgress
from streams.runtime.processor import group_id
from tests.memstream.node_process import node_env, node_process
from tests.memstream.own_broker import OwnBroker, own_broker
from tests.memstream.thread_memory import append_messages, wait_for_summary
from tests.streams.relays.support import journal_shard_seqs

SHARDS = 3
THREADS = 60
ACCOUNT = "acme"


@pytest.fixture
def broker_of_test(tmp_path: Path) -> Iterator[OwnBroker]:
    with own_broker(tmp_path / "broker") as broker:
        yield broker


@pytest.fixture
def sharded(settings: Settings, broker_of_test: OwnBroker) -> Settings:
    return settings.model_copy(
        update={"broker_url": f"kafka://{broker_of_test.bootstrap}", "journal_shards": SHARDS}
    )


class Deployment:
    """The node (projections, relays) and the worker (thread memory) of one data dir."""

    def __init__(self, settings: Settings, tmp_path: Path, key: str) -> None:
        self.port = free_port()
        self.env = node_env(settings, self.port)
        self.env["MEMSTREAM_NODE_PROCESSORS"] = json.dumps(["clickhouse-projection", "qdrant-projection"])
        self.node = node_process(self.env, tmp_path / "node.log")
        self.worker = ManagedProcess(
            name="worker",
            argv=[sys.executable, "-m", "memstream", "worker", "thresholds", "flush", "summarizer"],
            log_path=tmp_path / "worker.log",
            ready=lambda: True,
            env=self.env,
        )
        self.api = httpx.Client(
            base_url=f"http://127.0.0.1:{self.port}", headers={"Authorization": f"Bearer {key}"}, timeout=30
        )

    def start(self) -> None:
        self.node.start(timeout=120)
        self.worker.start(timeout=60)

    def stop(self) -> None:
        self.worker.stop()
        self.node.stop()
        self.api.close()


def thread_name(i: int) -> str:
    return f"t-{i}"


def the_shard(thread: str, settings: Settings) -> int:
    return shard_of(settings.environment, ACCOUNT, thread, SHARDS)


def append(api: httpx.Client, thread: str, first: int, count: int) -> list[dict[str, Any]]:
    messages = [
        {
            "message_id": f"{thread}-{i}",
            "role": "user" if i % 2 == 0 else "assistant",
            "content": f"{thread} says {i}",
        }
        for i in range(first, first + count)
    ]
    response = api.post(
        f"/v1/threads/{thread}/messages", json={"agent_id": "bot", "user_id": "u", "messages": messages}
    )
    assert response.status_code == 201, response.text
    stored: list[dict[str, Any]] = response.json()["messages"]
    return stored


def verify(env: dict[str, str]) -> str:
    result = CliRunner().invoke(main, ["verify", "--wait", "90"], env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def projected_rows(settings: Settings) -> list[tuple[str, int, int, int]]:
    """(thread, offset, shard, seq) of every message of the ClickHouse projection, deduplicated,
    read by a process of its own (the node held the chdb path; this process may hold another)."""
    database = settings.clickhouse_database
    script = (
        "import json, sys, clickhouse_connect\n"
        "client = clickhouse_connect.get_client(dsn=sys.argv[1])\n"
        "print(json.dumps([list(row) for row in client.query(sys.argv[2]).result_rows]))\n"
    )
    sql = f"SELECT thread_id, offset, shard, seq FROM {database}.messages FINAL ORDER BY thread_id, offset"
    done = subprocess.run(
        [sys.executable, "-c", script, settings.clickhouse, sql],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return [tuple(row) for row in json.loads(done.stdout.strip().splitlines()[-1])]


def wait_for_checkpoints(settings: Settings, up_to: dict[int, int], timeout_s: float = 60) -> None:
    """Until every journal consumer group's stored watermark of each shard reached `up_to[shard]`."""

    async def lowest() -> dict[int, int]:
        pool = await create_pool(settings.postgres, min_size=1, max_size=1)
        try:
            progress = PostgresProgress(pool)
            groups = [group_id(name, settings) for name in consumers_of("journal.messages", settings)]
            topic = settings.topic("journal.messages")
            return {shard: await progress.low_watermark(groups, topic, shard) for shard in up_to}
        finally:
            await pool.close()

    deadline = time.monotonic() + timeout_s
    while (found := asyncio.run(lowest())) != up_to:
        assert time.monotonic() < deadline, f"watermarks {found}, wanted {up_to}"
        time.sleep(0.5)


def wait_for_topic(settings: Settings, expected: set[tuple[int, int]], timeout_s: float = 90) -> None:
    """Until `journal.messages` holds exactly the (shard, seq) of `expected` (each at least once)."""
    deadline = time.monotonic() + timeout_s
    while set(found := journal_shard_seqs(settings)) != expected:
        assert time.monotonic() < deadline, f"topic holds {sorted(found)[:30]}..., wanted {sorted(expected)}"
        time.sleep(1.0)


def test_three_shards_serve_appends_contexts_thread_memory_and_a_broker_loss(
    sharded: Settings, broker_of_test: OwnBroker, tmp_path: Path
) -> None:
    key = asyncio.run(create_key(sharded, ACCOUNT))
    deployment = Deployment(sharded, tmp_path, key)
    deployment.start()
    stored: dict[str, list[dict[str, Any]]] = defaultdict(list)
    try:
        api = deployment.api
        for i in range(THREADS):
            thread = thread_name(i)
            stored[thread] += append(api, thread, 0, 3 + i % 4)
        for i in range(0, THREADS, 3):  # a second append to some threads
            thread = thread_name(i)
            stored[thread] += append(api, thread, len(stored[thread]), 2)
        append_messages(api, "long-trip", "ada", 55, "My name is Ada. I prefer window seats.")
        stored["long-trip"] = api.get("/v1/threads/long-trip/messages", params={"limit": 100}).json()[
            "messages"
        ]

        # every thread's messages are of its shard, its offsets dense; each shard's seqs are 1..n
        seqs: dict[int, list[int]] = defaultdict(list)
        for thread, messages in stored.items():
            shard = the_shard(thread, sharded)
            assert {m["shard"] for m in messages} == {shard}, thread
            assert [m["offset"] for m in messages] == list(range(len(messages)))
            seqs[shard] += [m["seq"] for m in messages]
        assert set(seqs) == set(range(SHARDS))  # 61 threads spread over every shard
        for shard, numbers in seqs.items():
            assert sorted(numbers) == list(range(1, len(numbers) + 1)), shard

        # every context is the thread's own last messages, in order
        for thread, messages in stored.items():
            if thread == "long-trip":
                continue
            context = api.get(f"/v1/threads/{thread}/context").json()
            assert [m["content"] for m in context["messages"]] == [m["content"] for m in messages]
        # thread memory, in the worker, over the shards' read-only views
        context = wait_for_summary(api, "long-trip")
        assert context["messages"][0]["content"].startswith("Previous conversation summary:")
        assert context["messages"][-1]["content"] == "Message 54 about the trip."

        total = sum(len(m) for m in stored.values())
        assert f"journal: {total} messages in {len(stored)} threads; projection: {total} messages" in verify(
            deployment.env
        )

        # the broker loses every topic and group: each shard refills from its own checkpoint
        before = {shard: len(numbers) for shard, numbers in seqs.items()}
        wait_for_checkpoints(sharded, before)  # every group processed everything, and stored it
        deployment.worker.stop()  # as `memstream up` does, the worker starts again on the new broker
        broker_of_test.restart()
        deployment.worker.start(timeout=60)
        late: dict[int, list[int]] = defaultdict(list)
        for i in range(6):
            thread = thread_name(i)
            for message in append(api, thread, len(stored[thread]), 2):
                late[message["shard"]].append(message["seq"])
                stored[thread].append(message)
        assert set(late) == set(range(SHARDS))
        for shard, numbers in late.items():
            assert sorted(numbers) == list(range(before[shard] + 1, before[shard] + len(numbers) + 1))
        wait_for_topic(sharded, {(shard, seq) for shard, numbers in late.items() for seq in numbers})
        total = sum(len(m) for m in stored.values())
        assert f"journal: {total} messages in {len(stored)} threads; projection: {total} messages" in verify(
            deployment.env
        )
        log = deployment.node.log_path.read_text()
        for shard in range(SHARDS):
            assert f"republishing journal shard {shard} from seq {before[shard] + 1}" in log, shard

        # a rebuild needs every seq of every shard: the topic lacks the early ones since the loss,
        # so each shard is republished from seq 1 first, then read until each shard's last seq
        rebuilt = CliRunner().invoke(
            main, ["rebuild", "clickhouse"], env=deployment.env, catch_exceptions=False
        )
        assert rebuilt.exit_code == 0, rebuilt.output
        assert f"rebuilt clickhouse: {total} rows" in rebuilt.output
        for shard, numbers in seqs.items():
            assert f"target_seq_shard_{shard} {len(numbers) + len(late[shard])}" in rebuilt.output
        assert f"journal: {total} messages in {len(stored)} threads; projection: {total} messages" in verify(
            deployment.env
        )
    finally:
        deployment.stop()

    # the projection holds every message once, with its shard and seq
    rows = projected_rows(sharded)
    expected = sorted(
        (thread, m["offset"], m["shard"], m["seq"]) for thread, messages in stored.items() for m in messages
    )
    assert sorted(rows) == expected
    assert Counter((shard, seq) for _, _, shard, seq in rows).most_common(1)[0][1] == 1

    # another shard count is refused before anything is served
    for count in (1, 2):
        refused = node_process(
            {**node_env(sharded, free_port()), "MEMSTREAM_JOURNAL_SHARDS": str(count)},
            tmp_path / f"refused-{count}.log",
        )
        with pytest.raises(ServiceError, match="exited with code 1"):
            refused.start(timeout=120)
        text = refused.log_path.read_text()
        assert "Resharding is not supported" in text and f"configured with {count}" in text, text[-2000:]
