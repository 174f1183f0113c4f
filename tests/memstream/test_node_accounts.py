"""`memstream export` / `memstream import` end to end: the CLI against a real node process (its
admin API streams the export and runs the import inside the node). The round trip goes through
another account of the same node (two node processes are too heavy for this machine; the
round trip into a second, empty node is tested on the real engines in
tests/memstream/ops/test_account_transfer.py): the copy exports as the same bytes but for the
memory entry ids the import had to renumber (they are the source account's), a second import adds
nothing, the imported entries reach the Qdrant index through the outbox, and a bad file imports
nothing."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner, Result

from core.config import Settings
from core.memory.restore import tenant_entry_id
from memstream.cli import main
from memstream.embedded.bootstrap import create_key
from tests.memstream.node_process import RunningNode, running_node


@pytest.fixture
def node(settings: Settings, tmp_path: Path) -> Iterator[RunningNode]:
    with running_node(settings, tmp_path) as running:
        yield running


def cli(node: RunningNode, *args: str) -> Result:
    return CliRunner().invoke(main, list(args), env=node.env, catch_exceptions=False)


def tool(client: httpx.Client, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    response = client.post(f"/v1/agents/bot/tools/{name}", json={"arguments": arguments, "user_id": "alice"})
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()["result"]
    return result


def populate(api: httpx.Client) -> None:
    assert api.put("/v1/agents/bot", json={"capabilities": ["memory"]}).status_code == 200
    messages = [
        {
            "message_id": "m-1",
            "role": "user",
            "content": "When do we deploy?",
            "created_at": "2024-05-01T10:00:00Z",
        },
        {
            "message_id": "m-2",
            "role": "assistant",
            "content": "",
            "tool_call": {"id": "call-1", "name": "calendar", "arguments": '{"q": "deploy"}'},
        },
        {"message_id": "m-3", "role": "tool", "tool_call": {"id": "call-1", "result": "Tuesdays"}},
        {"message_id": "m-4", "role": "assistant", "content": "On Tuesdays.\u2028Every week\u0085 ✓\r\n"},
    ]
    response = api.post(
        "/v1/threads/t-1/messages", json={"agent_id": "bot", "user_id": "alice", "messages": messages}
    )
    assert response.status_code == 201, response.text
    tool(
        api,
        "memory_store",
        {"key": "deploy.day", "content": "Deploys happen on Tuesdays.", "category": "project_fact"},
    )
    tool(
        api,
        "memory_store",
        {
            "key": "style",
            "content": "Alice prefers short answers.",
            "category": "user_profile",
            "scope": "private",
        },
    )


def test_export_and_import_through_the_node(node: RunningNode, settings: Settings, tmp_path: Path) -> None:
    populate(node.api)
    assert httpx.get(f"{node.url}/admin/v1/accounts/acme/export").status_code == 401  # admin token only

    source = tmp_path / "acme.jsonl"
    exported = cli(node, "export", "--account", "acme", "--output", str(source))
    assert exported.exit_code == 0, exported.output
    assert "exported account acme: 1 agent, 1 thread, 4 message, 0 summary, 2 memory entry" in exported.stderr
    text = source.read_text(encoding="utf-8")
    assert text.splitlines()[0] == '{"format":"memstream.account","format_version":1,"type":"header"}'
    assert not (tmp_path / "acme.jsonl.partial").exists()

    imported = cli(node, "import", str(source), "--account", "acme-2", "--json")
    assert imported.exit_code == 0, imported.output
    report = json.loads(imported.stdout)
    assert report["ok"] and report["conflicts"] == [] and report["screened"] == []
    assert report["added"] == {"agent": 1, "thread": 1, "message": 4, "summary": 0, "memory_entry": 2}
    ids = [json.loads(x)["entry_id"] for x in text.splitlines() if '"type":"memory_entry"' in x]
    assert [r["entry_id"] for r in report["renumbered"]] == ids  # the ids are acme's on this node

    copy = tmp_path / "acme-2.jsonl"
    assert cli(node, "export", "--account", "acme-2", "-o", str(copy)).exit_code == 0
    copied = copy.read_text(encoding="utf-8")
    for old in ids:
        copied = copied.replace(tenant_entry_id(settings.environment, "acme-2", old), old)
    assert sorted(copied.splitlines()) == sorted(text.splitlines())

    again = cli(node, "import", str(source), "--account", "acme-2")
    assert again.exit_code == 0, again.output
    assert "added: 0 agent, 0 thread, 0 message, 0 summary, 0 memory entry" in again.stdout
    assert "already there: 1 agent, 1 thread, 4 message, 0 summary, 2 memory entry" in again.stdout

    # the restored entries were published to the index: acme-2's recall answers from Qdrant
    key = asyncio.run(create_key(settings, "acme-2"))
    with httpx.Client(base_url=node.url, headers={"Authorization": f"Bearer {key}"}, timeout=30) as acme2:
        deadline = time.monotonic() + 90
        while True:
            recalled = tool(acme2, "memory_recall", {"query": "when are deploys?"})
            if recalled["path"] == "qdrant" and recalled["count"]:
                break
            assert time.monotonic() < deadline, f"recall never answered from the index: {recalled}"
            time.sleep(0.5)
        assert recalled["results"][0]["key"] == "deploy.day"

    bad = tmp_path / "bad.jsonl"
    bad.write_text(text.replace('"format_version":1', '"format_version":9'), encoding="utf-8")
    refused = cli(node, "import", str(bad), "--account", "acme-3")
    assert refused.exit_code == 1
    assert "error (invalid_export) [line 1]: line 1: unsupported format_version 9" in refused.stderr
    empty = cli(node, "export", "--account", "acme-3")
    assert "0 agent, 0 thread, 0 message, 0 summary, 0 memory entry" in empty.stderr
