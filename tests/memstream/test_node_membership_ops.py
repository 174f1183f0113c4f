"""`memstream verify` and `memstream rebuild` with the shard membership on (`MEMSTREAM_MEMBERSHIP`):
two `memstream node` processes, two journal shards (one each), node `a` hosting the embedded
projections (`MEMSTREAM_PROJECTIONS_NODE`).

- messages of threads of both shards, appended through both nodes;
- `memstream verify` asked of node `b` is forwarded to node `a`, which counts every shard (its own
  through its writer, `b`'s through a read-only view) against its ClickHouse: ok, every message of
  both shards; asked of node `a`: the same; the admin token is still checked (by node `a`);
- `memstream rebuild clickhouse` asked of node `b`: node `a` has node `b` check its shard's part of
  the topic (`/admin/v1/shards/full-history`), rebuilds from every shard's seqs and swaps in: every
  message once (the rebuilt rows, verify afterwards, transcript search through node `b`);
- `memstream rebuild qdrant` asked of node `b` is done by node `a`.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from core.config import Settings
from memstream.cli import main
from memstream.embedded.bootstrap import create_key
from tests.memstream.cluster import Cluster, ClusterNode, client, two_nodes
from tests.memstream.test_node_membership import ACCOUNT, SHARDS, append, threads_of_each_shard

PER_THREAD = 3


@pytest.fixture
def cluster(settings: Settings, tmp_path: Path) -> Iterator[Cluster]:
    with two_nodes(settings, tmp_path, SHARDS) as cluster:
        yield cluster


def cli(node: ClusterNode, *args: str) -> str:
    """`memstream ARGS --node <node>` with the node's settings (its admin token): exit 0, its stdout
    (the progress goes to stderr)."""
    result = CliRunner().invoke(main, [*args, "--node", node.url], env=node.env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


def verified(node: ClusterNode) -> dict[str, Any]:
    report: dict[str, Any] = json.loads(cli(node, "verify", "--wait", "60", "--json"))
    return report


def test_verify_and_rebuild_asked_of_any_node(cluster: Cluster, settings: Settings) -> None:
    key = asyncio.run(create_key(settings, ACCOUNT))
    owners = cluster.wait_for_owners(SHARDS, among={"a", "b"})
    assert sorted(owners.values()) == ["a", "b"], owners
    node_a, node_b = cluster.nodes
    by_shard = threads_of_each_shard(settings, 2, prefix="ops-")
    threads = [thread for shard_threads in by_shard.values() for thread in shard_threads]
    with client(node_a, key) as api_a, client(node_b, key) as api_b:
        for n, thread in enumerate(threads):
            api = api_a if n % 2 == 0 else api_b  # through the owner and through the other node
            append(api, thread, [f"{thread} harbour {i}" for i in range(PER_THREAD)])
        total = PER_THREAD * len(threads)

        for node in (node_b, node_a):  # b forwards to a; a runs it
            report = verified(node)
            assert report["differences"] == [], report
            assert (report["journal_threads"], report["journal_messages"]) == (len(threads), total), report
            assert (report["projection_threads"], report["projection_messages"]) == (len(threads), total)
            assert report["pending_messages"] == 0
        assert httpx.get(node_b.url + "/admin/v1/verify").status_code == 401  # checked by node a

        rebuilt = cli(node_b, "rebuild", "clickhouse")
        assert f"rebuilt clickhouse: {total} rows" in rebuilt, rebuilt
        for shard in range(SHARDS):
            assert f"target_seq_shard_{shard} " in rebuilt, rebuilt
        report = verified(node_b)
        assert report["differences"] == [], report
        assert (report["journal_messages"], report["projection_messages"]) == (total, total), report
        deadline = time.monotonic() + 30
        while True:  # transcript search asked of b (answered by a): every message, once
            response = api_b.post(
                "/v1/agents/bot/tools/journal_message_search",
                json={"arguments": {"query": "harbour", "limit": 50}, "user_id": "u"},
            )
            assert response.status_code == 200, response.text
            found = {hit["thread_id"] for hit in response.json()["result"]["threads"]}
            if found == set(threads):
                break
            assert time.monotonic() < deadline, f"search finds {sorted(found)}, wanted {sorted(threads)}"
            time.sleep(1)

        assert "rebuilt qdrant" in cli(node_b, "rebuild", "qdrant")
