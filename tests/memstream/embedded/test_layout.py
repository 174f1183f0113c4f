"""`memstream up`'s process layout (`memstream.embedded.supervisor.layout`): which processors the
node hosts and which its worker runs."""

from __future__ import annotations

from core.config import Settings
from memstream.embedded.supervisor import layout


def test_the_opt_in_transcript_vectors_runs_in_the_node_only_when_on() -> None:
    off = layout(Settings())
    assert off.node == ("clickhouse-projection", "qdrant-projection")
    assert off.worker == ("flush", "summarizer", "thresholds")
    on = layout(Settings(transcript_vectors=True))  # a chdb writer: where the chdb path is open
    assert on.node == ("clickhouse-projection", "qdrant-projection", "transcript-vectors")
    assert on.worker == off.worker
