"""The node refills its broker's journal topic by itself, from its processors' checkpoints.

A real `memstream node` process on a Tansu broker of the test's own, real Postgres and Redis:
- the broker restarts (memory-only: the topic and every consumer group are gone): the node
  publishes again only what its processors had not processed (here: nothing but the new
  appends), not the whole journal;
- another node moved the shared journal's relay cursor while publishing to ITS broker: the node
  notices that the cursor belongs to another topic and publishes the gap.
After both, `memstream verify` finds every journal message in the ClickHouse projection.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from core.config import Settings
from core.journal.models import NewMessage, ThreadRef
from memstream.cli import main
from sinks.slatedb.journal import SlateJournal
from tests.memstream.node_process import RunningNode, running_node
from tests.memstream.own_broker import OwnBroker, own_broker
from tests.streams.relays.support import journal_seqs

OTHER_TOPIC = 12345
"""The fingerprint (`streams.identity`) of another broker's journal topic."""


@pytest.fixture
def broker_of_test(tmp_path: Path) -> Iterator[OwnBroker]:
    with own_broker(tmp_path / "broker") as broker:
        yield broker


@pytest.fixture
def node_settings(settings: Settings, broker_of_test: OwnBroker) -> Settings:
    return settings.model_copy(update={"broker_url": f"kafka://{broker_of_test.bootstrap}"})


def append(node: RunningNode, first: int, count: int, threads: int = 10) -> None:
    for t in range(threads):
        messages = [
            {"message_id": f"m-{i}", "role": "user", "content": f"message {i}"}
            for i in range(first, first + count)
            if i % threads == t
        ]
        if messages:
            response = node.api.post(
                f"/v1/threads/t-{t}/messages", json={"agent_id": "bot", "messages": messages}
            )
            assert response.status_code == 201, response.text


def verify(node: RunningNode, wait_s: int = 90) -> str:
    result = CliRunner().invoke(main, ["verify", "--wait", str(wait_s)], env=node.env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def wait_for_seqs(settings: Settings, expected: set[int], timeout_s: float = 60) -> None:
    """Until the topic holds every seq of `expected` and nothing else (at least once each)."""
    deadline = time.monotonic() + timeout_s
    while set(found := journal_seqs(settings)) != expected:
        assert time.monotonic() < deadline, f"topic holds {sorted(found)[:20]}..., wanted {sorted(expected)}"
        time.sleep(1.0)


def test_a_broker_restart_republishes_from_the_checkpoint_not_from_seq_1(
    node_settings: Settings, broker_of_test: OwnBroker, tmp_path: Path
) -> None:
    with running_node(node_settings, tmp_path) as node:
        append(node, 0, 200)
        assert "journal: 200 messages in 10 threads; projection: 200 messages" in verify(node)
        time.sleep(2)  # the thresholds processor's last batch is checkpointed too
        broker_of_test.restart()
        append(node, 200, 10)  # the relay finds the topic gone; the node recreates and refills it
        # only what the processors lacked is on the new topic: the 10 new appends, nothing before
        wait_for_seqs(node_settings, set(range(201, 211)))
        assert "journal: 210 messages in 10 threads; projection: 210 messages" in verify(node)
        log = node.log.read_text()
        assert "republishing the journal from seq 201" in log


def test_a_cursor_moved_by_another_node_is_detected_and_the_gap_republished(
    node_settings: Settings, tmp_path: Path
) -> None:
    with running_node(node_settings, tmp_path / "first") as node:
        append(node, 0, 100)
        verify(node)
        time.sleep(2)

    async def another_node() -> None:
        """Opens the journal, appends 50 messages and publishes them to its own broker: the shared
        relay cursor moves to 150 and names that broker's topic."""
        journal = await SlateJournal.open(node_settings.journal)
        try:
            for i in range(100, 150):
                ref = ThreadRef(environment="test", account_id="acme", thread_id=f"t-{i % 10}")
                await journal.append(
                    ref, "bot", None, [NewMessage(message_id=f"m-{i}", role="user", content=f"{i}")]
                )
            await journal.set_cursor("relay.journal.messages", 150)
            await journal.set_cursor("relay.journal.messages.topic", OTHER_TOPIC)
        finally:
            await journal.close()

    asyncio.run(another_node())
    with running_node(node_settings, tmp_path / "second") as node:
        assert "journal: 150 messages in 10 threads; projection: 150 messages" in verify(node)
        assert journal_seqs(node_settings) == Counter(range(1, 151))  # 101..150 republished, once
