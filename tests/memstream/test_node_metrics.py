"""`/metrics` of a real node process on the embedded test servers: admin token only, request
durations by route template, journal and recall figures, and every processor's consumer lag and
dead letters read from the broker, which settle at zero once the node caught up."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from core.config import Settings
from memstream.wiring.processors import enabled, processor_names
from tests.memstream.node_process import RunningNode, running_node

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@pytest.fixture
def node(settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RunningNode]:
    monkeypatch.setenv("MEMSTREAM_METRICS_REFRESH_S", "0.5")  # the node's environment starts from ours
    with running_node(settings, tmp_path) as running:
        yield running


def scrape(node: RunningNode, token: str) -> Samples:
    response = httpx.get(f"{node.url}/metrics", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def test_metrics_of_a_running_node(node: RunningNode, settings: Settings) -> None:
    token = (settings.data_path / "admin.token").read_text().strip()
    assert httpx.get(f"{node.url}/metrics").status_code == 401
    assert node.api.get("/metrics").status_code == 401  # an API key is one account's: not enough

    messages = [{"message_id": f"m-{i}", "role": "user", "content": f"message {i}"} for i in range(5)]
    body = {"agent_id": "bot", "user_id": "u1", "messages": messages}
    assert node.api.post("/v1/threads/t-1/messages", json=body).status_code == 201
    assert node.api.post("/v1/threads/t-1/messages", json=body).status_code == 201  # a retry
    assert node.api.get("/v1/threads/t-1/context").status_code == 200
    assert node.api.get("/v1/threads/t-1/nothing").status_code == 404
    assert node.api.put("/v1/agents/bot", json={"capabilities": ["memory"]}).status_code == 200
    recall = {"user_id": "u1", "arguments": {"query": "anything"}}
    recalled = node.api.post("/v1/agents/bot/tools/memory_recall", json=recall)
    assert recalled.status_code == 200, recalled.text
    path = recalled.json()["result"]["path"]

    samples = scrape(node, token)
    duration = "memstream_http_request_duration_seconds_count"
    append_route = "/v1/threads/{thread_id}/messages"
    assert value(samples, duration, method="POST", route=append_route, status="201") == 2
    assert value(samples, duration, method="GET", route="/v1/threads/{thread_id}/context", status="200") == 1
    assert value(samples, duration, method="GET", route="unmatched", status="404") == 1
    assert not [key for key in samples if key[0] == duration and "t-1" in str(key[1])]  # templates only
    appended = value(
        samples, "memstream_messages_appended_total", environment=settings.environment, account="acme"
    )
    assert appended == 5  # the retry wrote nothing
    assert (value(samples, "memstream_journal_group_messages_count") or 0) >= 1
    assert value(samples, "memstream_journal_append_duration_seconds_count") == 2
    assert value(samples, "memstream_memory_recalls_total", path=path) == 1

    # the figures read in the background: every processor, caught up, no dead letters
    deadline = time.monotonic() + 90
    while True:
        samples = scrape(node, token)
        lags = {
            name: value(samples, "memstream_processor_lag_messages", processor=name)
            for name in processor_names()
            if enabled(name, Settings())  # the opt-in ones are off: not run, no figures
        }
        if all(lag == 0 for lag in lags.values()) and value(samples, "memstream_relay_lag_messages") == 0:
            break
        assert time.monotonic() < deadline, lags
        time.sleep(0.5)
    for name in lags:
        assert value(samples, "memstream_dead_letter_records", processor=name) == 0, name
    assert value(samples, "memstream_summaries_written_total") == 0
    assert value(samples, "memstream_compactions_in_flight") == 0
    age = value(samples, "memstream_metrics_refresh_age_seconds")
    assert age is not None and age < 60
