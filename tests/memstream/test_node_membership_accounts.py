"""`memstream export` / `memstream import` with the shard membership on: two `memstream node`
processes (`tests.memstream.cluster`), two journal shards, one each. The account has threads on
both shards (several messages, original times, a tool call and its result), an agent and memory
entries.

- the export asked of node `b` is the bytes of the export asked of node `a` (each node reads the
  threads of the other's shard through their owner);
- after the account's threads are deleted, the import asked of node `b` writes every thread's
  messages back, each through its shard's owner, and the account exports as the same bytes
  again; the messages read back through either node;
- a second import adds nothing; a file whose message differs from what a thread of the other
  node's shard holds is reported as a conflict (exit 1) and writes nothing of that thread.
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner, Result

from core.config import Settings
from memstream.cli import main
from memstream.embedded.bootstrap import create_key
from tests.memstream.cluster import Cluster, ClusterNode, client, two_nodes
from tests.memstream.test_node_membership import ACCOUNT, SHARDS, get, retried, threads_of_each_shard

NOTHING = {"agent": 0, "thread": 0, "message": 0, "summary": 0, "memory_entry": 0}


@pytest.fixture
def cluster(settings: Settings, tmp_path: Path) -> Iterator[Cluster]:
    with two_nodes(settings, tmp_path, SHARDS) as cluster:
        yield cluster


MOVING = ("shard_not_local", "owner_unknown", "owner_unreachable")
"""The errors of a shard between owners (a handover; on a loaded machine a lease not renewed in
time): the command is run again, as an operator would."""


def cli(node: ClusterNode, *args: str, timeout_s: float = 60) -> Result:
    """`memstream ARGS --node URL` of `node`, again while it stops on a shard between owners."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = CliRunner().invoke(main, [*args, "--node", node.url], env=node.env, catch_exceptions=False)
        if result.exit_code == 0 or not any(f"({code})" in result.output for code in MOVING):
            return result
        assert time.monotonic() < deadline, result.output
        time.sleep(1)


def conversation(thread: str, n: int) -> list[dict[str, Any]]:
    """Thread `thread`'s `n`-th conversation: a question with its original time, a tool call, its
    result and the answer."""
    return [
        {
            "message_id": f"{thread}-{n}-q",
            "role": "user",
            "content": f"When does {thread} deploy? ({n})",
            "created_at": f"2024-05-0{n + 1}T10:00:00.123456Z",
        },
        {
            "message_id": f"{thread}-{n}-call",
            "role": "assistant",
            "content": "",
            "reasoning": "look it up",
            "tool_call": {"id": f"call-{n}", "name": "calendar", "arguments": json.dumps({"q": thread})},
        },
        {
            "message_id": f"{thread}-{n}-result",
            "role": "tool",
            "tool_call": {"id": f"call-{n}", "result": "Tue"},
        },
        {"message_id": f"{thread}-{n}-a", "role": "assistant", "content": "On Tuesdays.\u2028Every week ✓"},
    ]


def populate(api_a: httpx.Client, api_b: httpx.Client, threads: list[str]) -> None:
    assert retried(lambda: api_b.put("/v1/agents/bot", json={"capabilities": ["memory"]})).status_code == 200
    for i, thread in enumerate(threads):
        api = api_a if i % 2 == 0 else api_b  # through the owner and through the other node
        for n in range(2):
            body = {"agent_id": "bot", "user_id": "alice", "messages": conversation(thread, n)}
            response = retried(lambda: api.post(f"/v1/threads/{thread}/messages", json=body))  # noqa: B023
            assert response.status_code == 201, response.text
    for key, content, category, scope in [
        ("deploy.day", "Deploys happen on Tuesdays.", "project_fact", "shared"),
        ("style", "Alice prefers short answers.", "user_profile", "private"),
    ]:
        arguments = {"key": key, "content": content, "category": category, "scope": scope}
        tool_body = {"arguments": arguments, "user_id": "alice"}
        response = retried(functools.partial(api_b.post, "/v1/agents/bot/tools/memory_store", json=tool_body))
        assert response.status_code == 200, response.text


def export(node: ClusterNode, path: Path) -> str:
    exported = cli(node, "export", "--account", ACCOUNT, "--output", str(path))
    assert exported.exit_code == 0, exported.output
    return path.read_text(encoding="utf-8")


def records(text: str, kind: str) -> list[dict[str, Any]]:
    return [line for line in map(json.loads, text.splitlines()) if line["type"] == kind]


def imported(node: ClusterNode, path: Path, exit_code: int = 0) -> dict[str, Any]:
    result = cli(node, "import", str(path), "--account", ACCOUNT, "--json")
    assert result.exit_code == exit_code, result.output
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def test_export_and_import_through_either_node(cluster: Cluster, settings: Settings, tmp_path: Path) -> None:
    key = asyncio.run(create_key(settings, ACCOUNT))
    owners = cluster.wait_for_owners(SHARDS, among={"a", "b"})
    assert sorted(owners.values()) == ["a", "b"], owners
    node_a, node_b = cluster.nodes
    by_shard = threads_of_each_shard(settings, 2, prefix="x-")
    threads = sorted(t for ts in by_shard.values() for t in ts)
    with client(node_a, key) as api_a, client(node_b, key) as api_b:
        populate(api_a, api_b, threads)
        stored = {t: get(api_a, f"/v1/threads/{t}/messages")["messages"] for t in threads}

        # the same bytes whichever node is asked
        first = export(node_a, tmp_path / "through-a.jsonl")
        assert export(node_b, tmp_path / "through-b.jsonl") == first
        in_order = [r["thread_id"] for r in records(first, "thread")]
        assert sorted(in_order) == threads
        messages = records(first, "message")
        assert len(messages) == 8 * len(threads) and len(records(first, "memory_entry")) == 2
        assert [(m["thread_id"], m["offset"]) for m in messages] == [
            (t, i) for t in in_order for i in range(8)
        ]
        assert messages[0]["created_at"] == "2024-05-01T10:00:00.123456Z"
        assert messages[1]["tool_call"] == {
            "id": "call-0",
            "name": "calendar",
            "arguments": json.dumps({"q": in_order[0]}),
            "result": None,
        }
        assert messages[1]["reasoning"] == "look it up" and messages[2]["tool_call"]["result"] == "Tue"

        # the account's threads deleted, the import through node b writes them back through their owners
        for thread in threads:
            deleted = retried(lambda: api_b.delete(f"/v1/threads/{thread}"))  # noqa: B023
            assert deleted.status_code == 200, deleted.text
        assert records(export(node_b, tmp_path / "emptied.jsonl"), "message") == []
        report = imported(node_b, tmp_path / "through-a.jsonl")
        assert report["ok"] and report["conflicts"] == [], report
        done = {kind: report["added"][kind] + report["unchanged"][kind] for kind in NOTHING}
        assert done == {
            **NOTHING,
            "agent": 1,
            "thread": len(threads),
            "message": len(messages),
            "memory_entry": 2,
        }
        assert (report["added"]["agent"], report["added"]["memory_entry"]) == (0, 0)  # they were kept
        assert export(node_a, tmp_path / "again-a.jsonl") == first
        assert export(node_b, tmp_path / "again-b.jsonl") == first
        for thread, messages_of_thread in stored.items():
            for api in (api_a, api_b):
                read = get(api, f"/v1/threads/{thread}/messages")["messages"]
                assert [{k: m[k] for k in m if k != "seq"} for m in read] == [
                    {k: m[k] for k in m if k != "seq"} for m in messages_of_thread
                ]  # the same messages (new seqs: seqs are never reused)

        # a second import adds nothing
        again = imported(node_b, tmp_path / "through-a.jsonl")
        assert again["ok"] and again["added"] == NOTHING, again
        assert again["unchanged"] == {
            **NOTHING,
            "agent": 1,
            "thread": len(threads),
            "message": len(messages),
            "memory_entry": 2,
        }

        # a message that differs from what a thread of node a's shard holds: a conflict, nothing written
        shard_of_a = next(k for k, name in owners.items() if name == "a")
        thread = by_shard[shard_of_a][0]
        changed = first.replace(f"When does {thread} deploy? (1)", "something else", 1)
        assert changed != first
        (tmp_path / "changed.jsonl").write_text(changed, encoding="utf-8")
        conflicting = imported(node_b, tmp_path / "changed.jsonl", exit_code=1)
        assert [(c["type"], c["id"]) for c in conflicting["conflicts"]] == [("message", f"{thread}-1-q")]
        assert conflicting["added"] == NOTHING
        assert export(node_b, tmp_path / "after-conflict.jsonl") == first
