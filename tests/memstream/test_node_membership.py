"""Two `memstream node` processes with the shard membership on (`MEMSTREAM_MEMBERSHIP`), two journal
shards, on the test's broker, Postgres and Redis, one shared journal and object store directory;
node `a` hosts the embedded projections (`MEMSTREAM_PROJECTIONS_NODE`).

- each node takes one shard (leases in Postgres);
- appends to threads of both shards through either node land in the thread's shard, once, and
  read back the same through the other node (the non-owner forwards);
- a request forwarded once is not forwarded again: 503 `not_owner` with `Retry-After`;
- the agent tools asked of node `b` are answered by node `a` (transcript search over every shard's
  messages, projected by node `a` alone);
- a user's erasure asked of node `b` deletes the user's threads of both shards (the messages of
  node `a`'s shard deleted by node `a`'s writer, through its admin route);
- node `b` stopping hands its shard over to node `a`, which then serves every thread.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.config import Settings
from core.sharding.shards import shard_of
from memstream.api.proxy import FORWARDED_BY
from memstream.embedded.bootstrap import create_key
from tests.memstream.cluster import Cluster, client, two_nodes

SHARDS = 2
ACCOUNT = "acme"


@pytest.fixture
def cluster(settings: Settings, tmp_path: Path) -> Iterator[Cluster]:
    with two_nodes(settings, tmp_path, SHARDS) as cluster:
        yield cluster


def threads_of_each_shard(settings: Settings, per_shard: int, prefix: str = "m-") -> dict[int, list[str]]:
    found: dict[int, list[str]] = {k: [] for k in range(SHARDS)}
    i = 0
    while any(len(ts) < per_shard for ts in found.values()):
        thread = f"{prefix}{i}"
        shard = shard_of(settings.environment, ACCOUNT, thread, SHARDS)
        if len(found[shard]) < per_shard:
            found[shard].append(thread)
        i += 1
    return found


def retried(send: Callable[[], httpx.Response], timeout_s: float = 20) -> httpx.Response:
    """`send()` again while it answers 503 (a shard being opened or handed over), as a client
    honouring `Retry-After` does."""
    deadline = time.monotonic() + timeout_s
    while (response := send()).status_code == 503 and time.monotonic() < deadline:
        assert "Retry-After" in response.headers, response.text
        time.sleep(0.2)
    return response


def get(api: httpx.Client, path: str) -> Any:
    response = retried(lambda: api.get(path))
    assert response.status_code == 200, response.text
    return response.json()


def append(
    api: httpx.Client, thread: str, texts: list[str], first: int = 0, user: str = "u"
) -> list[dict[str, Any]]:
    messages = [
        {"message_id": f"{thread}-{i}", "role": "user" if i % 2 == 0 else "assistant", "content": text}
        for i, text in enumerate(texts, start=first)
    ]
    body = {"agent_id": "bot", "user_id": user, "messages": messages}
    response = retried(lambda: api.post(f"/v1/threads/{thread}/messages", json=body))
    assert response.status_code == 201, response.text
    stored: list[dict[str, Any]] = response.json()["messages"]
    return stored


def test_two_nodes_share_the_shards_forward_and_hand_over(cluster: Cluster, settings: Settings) -> None:
    key = asyncio.run(create_key(settings, ACCOUNT))
    owners = cluster.wait_for_owners(SHARDS, among={"a", "b"})  # a took both, then handed one over
    assert sorted(owners.values()) == ["a", "b"], owners  # one shard each
    node_a, node_b = cluster.nodes
    by_shard = threads_of_each_shard(settings, 3)
    with client(node_a, key) as api_a, client(node_b, key) as api_b:
        stored: dict[str, list[dict[str, Any]]] = {}
        for shard, threads in by_shard.items():
            for n, thread in enumerate(threads):
                api = api_a if n % 2 == 0 else api_b  # through the owner and through the other node
                stored[thread] = append(api, thread, [f"{thread} lighthouse {i}" for i in range(3)])
                assert {m["shard"] for m in stored[thread]} == {shard}
                again = append(
                    api_b if api is api_a else api_a, thread, [f"{thread} lighthouse {i}" for i in range(3)]
                )
                assert again == stored[thread]  # a retry through the other node: the stored messages
        for thread, messages in stored.items():
            for api in (api_a, api_b):
                read = get(api, f"/v1/threads/{thread}/messages")["messages"]
                assert read == messages
                context = get(api, f"/v1/threads/{thread}/context")
                assert [m["content"] for m in context["messages"]] == [m["content"] for m in messages]

        # a request already forwarded once reaches a node that does not own the thread
        shard_of_b = next(k for k, name in owners.items() if name == "b")
        thread = by_shard[shard_of_b][0]
        refused = api_a.get(f"/v1/threads/{thread}/messages", headers={FORWARDED_BY: "some-node"})
        assert refused.status_code == 503, refused.text
        assert refused.headers["Retry-After"] == "1"
        assert refused.json()["error"]["code"] == "not_owner"
        assert refused.json()["error"]["owner"] == node_b.url

        # the agent tools asked of node b: node a answers, over every shard's messages
        deadline = time.monotonic() + 60
        while True:
            response = api_b.post(
                "/v1/agents/bot/tools/journal_message_search",
                json={"arguments": {"query": "lighthouse", "limit": 50}, "user_id": "u"},
            )
            assert response.status_code == 200, response.text
            found = {hit["thread_id"] for hit in response.json()["result"]["threads"]}
            if found == set(stored):
                break
            assert time.monotonic() < deadline, f"search finds {sorted(found)}, wanted {sorted(stored)}"
            time.sleep(1)

        # a user's erasure asked of node b deletes their threads of both shards (node a's through a)
        eve_threads = threads_of_each_shard(settings, 1, prefix="eve-")
        for threads in eve_threads.values():
            append(api_a, threads[0], ["eve's secret"], user="eve")
        erased = retried(lambda: api_b.delete("/v1/users/eve"))
        assert erased.status_code == 200, erased.text
        for threads in eve_threads.values():
            for api in (api_a, api_b):
                gone = retried(lambda: api.get(f"/v1/threads/{threads[0]}/messages"))  # noqa: B023
                assert gone.status_code == 404, gone.text
        assert get(api_b, f"/v1/threads/{by_shard[0][0]}/messages")["messages"] == stored[by_shard[0][0]]

        # node b stops: its shard is handed over to node a, which serves every thread
        node_b.process.stop()
        assert cluster.wait_for_owners(SHARDS, among={"a"}, timeout_s=15) == dict.fromkeys(range(SHARDS), "a")
        for thread, messages in stored.items():
            assert get(api_a, f"/v1/threads/{thread}/messages")["messages"] == messages
        thread = by_shard[shard_of_b][1]
        more = append(api_a, thread, ["after the handover"], first=3)
        assert (more[0]["shard"], more[0]["offset"]) == (shard_of_b, 3)
        assert get(api_a, f"/v1/threads/{thread}/messages")["messages"] == [*stored[thread], *more]
