"""Operator commands end to end: the `memstream` CLI against a real node process (its admin API)
on the embedded test servers: republish, verify, replay (refused while active, --coordinate)."""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import click
import httpx
import pytest
from click.testing import CliRunner, Result

from core.config import Settings
from memstream.cli import main
from memstream.cli.admin import _follow_lag
from memstream.embedded.process import free_port
from tests.memstream.node_process import RunningNode, node_env, running_node
from tests.streams.relays.support import journal_seqs


class Node(RunningNode):
    def cli(self, *args: str) -> Result:
        return CliRunner().invoke(main, list(args), env=self.env, catch_exceptions=False)


@pytest.fixture
def node(settings: Settings, tmp_path: Path) -> Iterator[Node]:
    with running_node(settings, tmp_path) as running:
        yield Node(api=running.api, url=running.url, env=running.env, log=running.log)


def append(node: Node, thread: str, count: int) -> None:
    messages = [
        {"message_id": f"{thread}-{i}", "role": "user" if i % 2 == 0 else "assistant", "content": f"m {i}"}
        for i in range(count)
    ]
    response = node.api.post(f"/v1/threads/{thread}/messages", json={"agent_id": "bot", "messages": messages})
    assert response.status_code == 201, response.text


def states(node: Node, token: str) -> dict[str, str]:
    response = httpx.get(f"{node.url}/admin/v1/processors", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200, response.text
    return {p["name"]: p["state"] for p in response.json()}


def wait_running(node: Node, token: str) -> None:
    deadline = time.monotonic() + 60
    while set(states(node, token).values()) != {"running"}:
        assert time.monotonic() < deadline, states(node, token)
        time.sleep(0.2)


def test_operator_commands_against_a_running_node(node: Node, settings: Settings) -> None:
    # the admin API takes the admin token only
    assert httpx.get(f"{node.url}/admin/v1/processors").status_code == 401
    assert node.api.get("/admin/v1/processors").status_code == 401
    token = (settings.data_path / "admin.token").read_text().strip()
    wait_running(node, token)

    for thread, count in (("t-1", 12), ("t-2", 7), ("t-3", 11)):
        append(node, thread, count)

    # verify waits for the projection to catch up, then matches
    result = node.cli("verify", "--wait", "60")
    assert result.exit_code == 0, result.output
    assert "journal: 30 messages in 3 threads; projection: 30 messages in 3 threads" in result.output
    assert "the projection matches the journal" in result.output

    # republish: validated against the journal, then publishes seq 10..30 again; still no duplicates
    result = node.cli("republish", "--from-seq", "31")
    assert result.exit_code == 1
    assert "past the journal's last seq 30" in result.output
    assert journal_seqs(settings) == Counter(range(1, 31))
    result = node.cli("republish", "--from-seq", "10")
    assert result.exit_code == 0, result.output
    assert "republished seq 10..30 (21 message(s)): the relay published 21 message(s)" in result.output
    assert journal_seqs(settings) == Counter({seq: 1 if seq < 10 else 2 for seq in range(1, 31)})
    assert node.cli("verify", "--wait", "30").exit_code == 0

    # rebuild: a fresh ClickHouse projection from the topic, swapped in; still matches the journal
    result = node.cli("rebuild", "clickhouse")
    assert result.exit_code == 0, result.output
    assert "rebuilt clickhouse: 30 rows" in result.output
    assert node.cli("verify").exit_code == 0
    result = node.cli("rebuild", "qdrant")  # no memory entries yet: an empty index, swapped in
    assert result.exit_code == 0, result.output
    assert "rebuilt qdrant: 0 rows" in result.output

    # replay: unknown processor lists the names; refused while the node runs it
    result = node.cli("replay", "nope", "--from", "earliest", "--yes")
    assert result.exit_code == 1
    assert "clickhouse-projection" in result.output and "thresholds" in result.output
    result = node.cli("replay", "clickhouse-projection", "--from", "earliest", "--yes", "--no-follow")
    assert result.exit_code == 1
    assert "this node runs processor clickhouse-projection" in result.output
    assert "--coordinate" in result.output
    result = node.cli("replay", "clickhouse-projection", "--from", "2026-01-01T00:00:00Z", "--yes")
    assert result.exit_code == 1
    assert "timestamp lookups" in result.output

    # --coordinate: paused, reset to the start, resumed, and it catches up again
    started = time.monotonic()
    result = node.cli("replay", "clickhouse-projection", "--from", "earliest", "--coordinate", "--yes")
    assert result.exit_code == 0, result.output
    plan = re.findall(r"journal\.messages\[(\d+)\]: committed (\d+) -> (\d+)", result.output)
    assert plan, result.output
    assert {target for _, _, target in plan} == {"0"}  # every partition back to its start
    assert sum(int(committed) for _, committed, _ in plan) == 51  # 30 appends + 21 republished
    assert "the node paused and resumed it" in result.output
    assert "processor clickhouse-projection caught up" in result.output
    assert time.monotonic() - started < 60
    assert states(node, token)["clickhouse-projection"] == "running"
    append(node, "t-4", 3)  # the resumed processor keeps projecting new appends
    result = node.cli("verify", "--wait", "30")
    assert result.exit_code == 0, result.output
    assert "33 messages in 4 threads" in result.output

    # a deleted thread: verify checks what the deletion left; a replay from the start (the topic still
    # holds the thread's records) does not bring it back
    deleted = node.api.delete("/v1/threads/t-2")
    assert deleted.status_code == 200, deleted.text
    assert deleted.json()["deleted"]["journal"]["messages"] == 7
    result = node.cli("verify", "--wait", "30")
    assert result.exit_code == 0, result.output
    assert "26 messages in 3 threads; projection: 26 messages in 3 threads" in result.output
    result = node.cli("replay", "clickhouse-projection", "--from", "earliest", "--coordinate", "--yes")
    assert result.exit_code == 0, result.output
    result = node.cli("verify", "--wait", "30")
    assert result.exit_code == 0, result.output
    assert "projection: 26 messages in 3 threads" in result.output


def test_commands_say_when_no_node_answers(base_settings: Settings, tmp_path: Path) -> None:
    env = node_env(base_settings, free_port())
    (base_settings.data_path).mkdir(parents=True, exist_ok=True)
    (base_settings.data_path / "admin.token").write_text("t0ken\n")
    runner = CliRunner()
    erase = ["erase-user", "--account", "acme", "--user", "ada", "--yes"]
    for args in (["verify"], ["republish", "--from-seq", "0"], ["rebuild", "clickhouse"], erase):
        result = runner.invoke(main, args, env=env)
        assert result.exit_code == 3, result.output
        assert "no memstream node answers" in result.output
        assert "memstream up" in result.output


def test_commands_say_when_there_is_no_admin_token(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["verify"], env={"MEMSTREAM_DATA_DIR": str(tmp_path)})
    assert result.exit_code == 1
    assert "no admin token" in result.output


class LagClient:
    """The two admin reads `replay`'s follow mode makes, answering scripted states and lags."""

    def __init__(self, answers: list[tuple[str, int]]) -> None:
        self.answers = answers
        self.state, self.lag = answers[0]

    def get(self, path: str) -> object:
        if path == "/admin/v1/processors":
            self.state, self.lag = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
            return [{"name": "p", "state": self.state}]
        assert path == "/admin/v1/processors/p/lag"
        return {"total_lag": self.lag, "partitions": [{"partition": 0, "lag": self.lag}]}


def follow(client: LagClient, timeout_s: float) -> tuple[int | None, str]:
    @click.command()
    def command() -> None:
        _follow_lag(client, "p", timeout_s, interval_s=0.01)  # type: ignore[arg-type]

    result = CliRunner().invoke(command, [])
    return (result.exit_code, result.output)


def test_follow_ends_when_caught_up_while_running() -> None:
    code, output = follow(LagClient([("running", 5), ("paused", 0), ("running", 0)]), 30)
    assert code == 0 and "processor p caught up" in output


def test_follow_ends_with_an_error_when_the_processor_crashed() -> None:
    code, output = follow(LagClient([("running", 5), ("crashed", 5)]), 30)
    assert code == 1
    assert "processor p is crashed in the node: it stopped catching up" in output
    assert "caught up" not in output.replace("catching up", "")


def test_follow_stops_at_its_deadline_under_steady_lag() -> None:
    code, output = follow(LagClient([("running", 7)]), 0.05)
    assert code == 0
    assert "stopped following after 0.05s: processor p is running with lag 7" in output
