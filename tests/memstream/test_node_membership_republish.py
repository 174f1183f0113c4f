"""`memstream republish` across nodes: two `memstream node` processes with the shard membership on
(`MEMSTREAM_MEMBERSHIP`), two journal shards (one each), on the test's broker, Postgres and Redis;
node `a` hosts the embedded projections.

- `memstream republish --from-seq 1` asked of node `b` republishes every shard, node `a`'s by
  node `a`: the report covers both shards and counts every message, and `journal.messages` holds
  every (shard, seq) once more than before;
- the ClickHouse projection (node `a`) stays exactly-once: once it consumed the copies, a
  transcript search through node `b` finds every message once;
- `--shard K` of node `a`'s shard asked of node `b` is carried out by node `a`, and its refusal
  (a seq past the shard's journal) is the same error, naming the shard and the node.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from core.config import Settings
from memstream.cli import main
from memstream.embedded.bootstrap import create_key
from tests.memstream.cluster import ADMIN_TOKEN, Cluster, ClusterNode, client, two_nodes
from tests.memstream.test_node_membership import append, threads_of_each_shard
from tests.streams.relays.support import journal_shard_seqs

SHARDS = 2
ACCOUNT = "acme"
MESSAGES = 4  # per thread


@pytest.fixture
def cluster(settings: Settings, tmp_path: Path) -> Iterator[Cluster]:
    with two_nodes(settings, tmp_path, SHARDS) as cluster:
        yield cluster


def republish(node: ClusterNode, *args: str) -> Any:
    return CliRunner().invoke(
        main, ["republish", *args, "--node", node.url], env=node.env, catch_exceptions=False
    )


def wait_for_projection_lag_zero(node: ClusterNode, timeout_s: float = 90) -> None:
    """Until the ClickHouse projection's group has consumed everything on `journal.messages`."""
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    deadline = time.monotonic() + timeout_s
    while True:
        response = httpx.get(node.url + "/admin/v1/processors/clickhouse-projection/lag", headers=admin)
        if response.status_code == 200 and response.json()["total_lag"] == 0:
            return
        assert time.monotonic() < deadline, f"projection lag: {response.text}"
        time.sleep(1)


def test_republish_asked_of_one_node_covers_every_shard_once(cluster: Cluster, settings: Settings) -> None:
    key = asyncio.run(create_key(settings, ACCOUNT))
    owners = cluster.wait_for_owners(SHARDS, among={"a", "b"})
    shard_of_a = next(k for k, name in owners.items() if name == "a")
    node_a, node_b = cluster.nodes
    by_shard = threads_of_each_shard(settings, 3, prefix="r-")
    stored: dict[str, list[dict[str, Any]]] = {}
    with client(node_a, key) as api_a, client(node_b, key) as api_b:
        for threads in by_shard.values():
            for n, thread in enumerate(threads):
                api = api_a if n % 2 == 0 else api_b
                stored[thread] = append(api, thread, [f"{thread} beacon {i}" for i in range(MESSAGES)])
        every = Counter((m["shard"], m["seq"]) for messages in stored.values() for m in messages)
        assert set(every.values()) == {1} and {shard for shard, _ in every} == {0, 1}
        last = {k: max(seq for shard, seq in every if shard == k) for k in range(SHARDS)}

        wait_for_projection_lag_zero(node_a)
        topic = cluster.settings.model_copy(update={"journal_shards": SHARDS})
        before = journal_shard_seqs(topic)
        assert set(before) == set(every)  # the relays published everything

        done = republish(node_b, "--from-seq", "1")
        assert done.exit_code == 0, done.output
        lines = [line for line in done.output.splitlines() if "republished seq" in line]  # not the bar
        assert [line.split(":")[0] for line in lines] == ["shard 0", "shard 1"], done.output
        assert f"shard {shard_of_a} on a-" in done.output  # node a's progress, relayed by node b
        for k, line in enumerate(lines):
            assert f"republished seq 1..{last[k]} ({last[k]} message(s))" in line, done.output
            assert f"the relay published {last[k]} message(s)" in line, done.output
        after = journal_shard_seqs(topic)
        assert after - before == every  # every (shard, seq) published once more, nothing else

        # one shard of node a, asked of node b: node a republishes it; its refusal is the same error
        one = republish(node_b, "--from-seq", "2", "--shard", str(shard_of_a))
        assert one.exit_code == 0, one.output
        assert f"shard {shard_of_a}: republished seq 2..{last[shard_of_a]}" in one.output
        refused = republish(node_b, "--from-seq", "999", "--shard", str(shard_of_a))
        assert refused.exit_code == 1, refused.output
        assert f"journal shard {shard_of_a} (served by node 'a-" in refused.output
        assert f"refused: --from-seq 999 is past the journal's last seq {last[shard_of_a]}" in refused.output

        # the projection consumed the copies and still holds every message once
        wait_for_projection_lag_zero(node_a)
        response = api_b.post(
            "/v1/agents/bot/tools/journal_message_search",
            json={"arguments": {"query": "beacon", "limit": 50, "summarize": False}, "user_id": "u"},
        )
        assert response.status_code == 200, response.text
        found = Counter(hit["message_id"] for hit in response.json()["result"]["messages"])
        assert found == Counter(m["message_id"] for messages in stored.values() for m in messages)
