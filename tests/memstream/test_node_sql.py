"""The SQL endpoint of a running node (a real `memstream node` process on the embedded engines):
data appended through the API is queried through clickhouse-connect with the README's five example
queries verbatim, the keys of the agent API and of the SQL endpoint each open one door only, and
`memstream sql` exports a time range as Parquet that reads back with pyarrow."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator
from datetime import date
from pathlib import Path
from typing import Any

import clickhouse_connect
import httpx
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from core.config import Settings
from core.sql.access import issue_data_key
from memstream.cli import main
from memstream.embedded.bootstrap import create_key, with_keys
from tests.memstream.node_process import RunningNode, running_node

README = Path(__file__).resolve().parents[2] / "README.md"
MONTH = "2026-11"


def readme_queries() -> list[str]:
    """The example queries of README "Transcript projection (ClickHouse) for data teams"."""
    section = README.read_text().split("Example queries", 1)[1]
    block = section.split("```sql\n", 1)[1].split("```", 1)[0]
    queries = [q.strip() for q in re.split(r";\s*$", block, flags=re.MULTILINE) if q.strip()]
    assert len(queries) == 5
    return queries


def _messages(prefix: str, day: int) -> list[dict[str, Any]]:
    at = f"{MONTH}-{day:02d}T10:00:00Z"
    return [
        {
            "message_id": f"{prefix}-0",
            "role": "user",
            "content": "I want a refund for order 7",
            "created_at": at,
        },
        {
            "message_id": f"{prefix}-1",
            "role": "assistant",
            "content": "",
            "tool_call": {"id": f"{prefix}-call", "name": "lookup_order", "arguments": '{"order": 7}'},
            "created_at": at,
        },
        {
            "message_id": f"{prefix}-2",
            "role": "tool",
            "tool_call": {"id": f"{prefix}-call", "result": "paid"},
            "created_at": at,
        },
        {
            "message_id": f"{prefix}-3",
            "role": "assistant",
            "content": "The refund is on its way.",
            "created_at": at,
        },
    ]


@pytest.fixture
def node(settings: Settings, tmp_path: Path) -> Iterator[tuple[Settings, RunningNode, dict[str, str]]]:
    prod = settings.model_copy(update={"environment": "prod"})  # the README queries' literals
    with running_node(prod, tmp_path, account="acme") as running:
        globex = asyncio.run(create_key(prod, "globex"))
        keys = {
            "acme": asyncio.run(with_keys(prod, lambda store: issue_data_key(store, "prod", "acme"))),
            "every": asyncio.run(with_keys(prod, lambda store: issue_data_key(store, "prod", None))),
            "globex-api": globex,
        }
        for thread, day in (("th-0", 3), ("th-1", 4)):
            body = {"agent_id": "support-bot", "user_id": "u-1", "messages": _messages(thread, day)}
            assert running.api.post(f"/v1/threads/{thread}/messages", json=body).status_code == 201
        body = {"agent_id": "support-bot", "user_id": "u-9", "messages": _messages("gx", 5)}
        answer = httpx.post(
            f"{running.url}/v1/threads/gx-0/messages",
            json=body,
            headers={"Authorization": f"Bearer {globex}"},
        )
        assert answer.status_code == 201, answer.text
        yield prod, running, keys


def _client(node: RunningNode, key: str) -> Any:
    port = int(node.sql_url.rsplit(":", 1)[1])
    return clickhouse_connect.get_client(host="127.0.0.1", port=port, username="analyst", password=key)


def _wait_projected(client: Any, count: int) -> None:
    deadline = time.monotonic() + 90
    while client.command("SELECT count() FROM memstream.messages_dedup") != count:
        assert time.monotonic() < deadline, "the projection did not catch up"
        time.sleep(0.5)


def test_readme_queries_run_verbatim_against_a_running_node(
    node: tuple[Settings, RunningNode, dict[str, str]],
) -> None:
    _, running, keys = node
    acme, every = _client(running, keys["acme"]), _client(running, keys["every"])
    _wait_projected(acme, 8)
    _wait_projected(every, 12)
    daily, thread, search, tools, accounts = (acme.query(q).result_rows for q in readme_queries())
    assert daily == [
        (date(2026, 11, 3), "support-bot", 4, daily[0][3]),
        (date(2026, 11, 4), "support-bot", 4, daily[1][3]),
    ]
    assert daily[0][3] > 0
    assert thread == [
        ("user", "I want a refund for order 7"),
        ("assistant", ""),
        ("tool", ""),
        ("assistant", "The refund is on its way."),
    ]
    assert {row[0] for row in search} == {"th-0", "th-1"} and all(
        "refund" in row[3].lower() for row in search
    )
    assert tools == [("lookup_order", 2, 4.0)]
    assert [row[:3] for row in accounts] == [("acme", 2, 8)]  # the acme key sees acme only
    everyone = every.query(readme_queries()[4]).result_rows
    assert sorted(row[:3] for row in everyone) == [("acme", 2, 8), ("globex", 1, 4)]


def test_each_key_opens_its_own_door(node: tuple[Settings, RunningNode, dict[str, str]]) -> None:
    _, running, keys = node
    agent_on_sql = httpx.post(running.sql_url, content=b"SELECT 1", auth=("u", keys["globex-api"]))
    assert agent_on_sql.status_code == 403 and "takes data-access keys only" in agent_on_sql.text
    data_on_api = httpx.get(f"{running.url}/v1/threads", headers={"Authorization": f"Bearer {keys['acme']}"})
    assert data_on_api.status_code == 401 and "data-access key" in data_on_api.text


def test_memstream_sql_exports_a_time_range_as_parquet(
    node: tuple[Settings, RunningNode, dict[str, str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, running, keys = node
    acme = _client(running, keys["acme"])
    _wait_projected(acme, 8)
    key_file = tmp_path / "data-key"
    key_file.write_text(keys["acme"] + "\n")
    output = tmp_path / "november.parquet"
    query = (
        "SELECT * FROM memstream.messages_dedup WHERE created_at >= '2026-11-01' "
        "AND created_at < '2026-12-01' ORDER BY thread_id, offset"
    )
    monkeypatch.setenv("MEMSTREAM_DATA_DIR", str(tmp_path / "cli"))
    runner = CliRunner()
    args = [
        "sql",
        query,
        "--format",
        "parquet",
        "--output",
        str(output),
        "--node",
        running.sql_url,
        "--key-file",
        str(key_file),
    ]
    result = runner.invoke(main, args)
    assert result.exit_code == 0, result.output
    table = pq.read_table(output)
    expected = acme.query(query)
    assert table.num_rows == len(expected.result_rows) == 8
    assert table.column_names == list(expected.column_names)
    columns = table.to_pydict()
    assert list(zip(columns["thread_id"], columns["offset"], columns["content"], strict=True)) == [
        (
            row[expected.column_names.index("thread_id")],
            row[expected.column_names.index("offset")],
            row[expected.column_names.index("content")],
        )
        for row in expected.result_rows
    ]
    csv = runner.invoke(
        main,
        [
            "sql",
            "SELECT count() AS n FROM memstream.messages_dedup",
            "--format",
            "csv",
            "--node",
            running.sql_url,
            "--key-file",
            str(key_file),
        ],
    )
    assert csv.exit_code == 0 and csv.output == '"n"\n8\n'
    refused = runner.invoke(
        main, ["sql", "SELECT file('/etc/passwd')", "--node", running.sql_url, "--key-file", str(key_file)]
    )
    assert refused.exit_code == 1 and "function file() is not allowed" in refused.output
    nobody = runner.invoke(
        main, ["sql", "SELECT 1", "--node", "http://127.0.0.1:9", "--key-file", str(key_file)]
    )
    assert nobody.exit_code == 3 and "no SQL endpoint answers" in nobody.output
    monkeypatch.delenv("MEMSTREAM_DATA_KEY", raising=False)
    no_key = runner.invoke(main, ["sql", "SELECT 1", "--node", running.sql_url])
    assert no_key.exit_code == 1 and re.search(r"keys create --data-access", no_key.output)
