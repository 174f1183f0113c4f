"""The registry of shipped processors."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr

from core.config import Settings
from memstream.wiring.processors import (
    GROUPS,
    PROCESSORS,
    SOURCES,
    THREAD_MEMORY,
    ProcessorFactory,
    consumers_of,
    create_processor,
    enabled,
    node_processor_names,
    processor_names,
)
from streams.runtime import UnknownProcessor
from streams.topics import default_registry
from tests.streams.runtime.support import PgWriter


def test_create_processor_builds_the_registered_one() -> None:
    factories: dict[str, ProcessorFactory] = {"writer": lambda s, _e: PgWriter("writer", s.postgres)}
    processor = create_processor("writer", Settings(), registry=factories)
    assert processor.name == "writer"
    assert processor_names(factories) == ["writer"]


def test_unknown_names_list_what_is_registered() -> None:
    with pytest.raises(UnknownProcessor, match="registered processors: a, b"):
        create_processor(
            "c",
            Settings(),
            registry={"b": lambda s, _e: PgWriter("b", ""), "a": lambda s, _e: PgWriter("a", "")},
        )
    with pytest.raises(UnknownProcessor, match=r"\(none registered yet\)"):
        create_processor("c", Settings(), registry={})


def test_a_factory_must_build_the_processor_it_is_registered_as() -> None:
    with pytest.raises(ValueError, match="built a processor named 'other'"):
        create_processor("writer", Settings(), registry={"writer": lambda s, _e: PgWriter("other", "")})


def test_every_shipped_processor_has_a_declared_dead_letter_topic() -> None:
    topics = default_registry()
    for name in PROCESSORS:
        assert topics.dlq_topic(name).name == f"dlq.{name}"
        assert create_processor(name, Settings()).name == name


def test_the_declared_sources_are_what_each_processor_consumes() -> None:
    assert set(SOURCES) == set(PROCESSORS)
    for name in PROCESSORS:
        assert create_processor(name, Settings()).source_topics == SOURCES[name]
    assert consumers_of("journal.messages") == ["clickhouse-projection", "thresholds", "transcript-vectors"]


def test_transcript_vectors_is_opt_in() -> None:
    """Off by default: not hosted, not counted among the topic's consumers (its group must not
    hold the journal topic's progress back); on: both."""
    off, on = Settings(), Settings(transcript_vectors=True)
    assert not enabled("transcript-vectors", off)
    assert enabled("transcript-vectors", on)
    assert all(enabled(name, off) for name in PROCESSORS if name != "transcript-vectors")
    assert consumers_of("journal.messages", off) == ["clickhouse-projection", "thresholds"]
    assert consumers_of("journal.messages", on) == [
        "clickhouse-projection",
        "thresholds",
        "transcript-vectors",
    ]
    assert "transcript-vectors" not in node_processor_names(off)
    assert "transcript-vectors" in node_processor_names(on)
    told = {"node_processors": ["transcript-vectors", "thresholds"]}
    assert node_processor_names(Settings(**told)) == ["thresholds"]
    assert node_processor_names(Settings(**told, transcript_vectors=True)) == [
        "thresholds",
        "transcript-vectors",
    ]


def test_the_node_hosts_every_processor_unless_told_otherwise() -> None:
    assert node_processor_names(Settings(transcript_vectors=True)) == processor_names()
    hosted = Settings(node_processors=["qdrant-projection", "clickhouse-projection", "qdrant-projection"])
    assert node_processor_names(hosted) == ["clickhouse-projection", "qdrant-projection"]
    assert node_processor_names(Settings(node_processors=[])) == []
    with pytest.raises(UnknownProcessor, match="'nope'"):
        node_processor_names(Settings(node_processors=["thresholds", "nope"]))


def test_the_thread_memory_group_is_registered_processors() -> None:
    assert set(GROUPS["thread-memory"]) == set(THREAD_MEMORY) == {"thresholds", "flush", "summarizer"}
    assert set(THREAD_MEMORY) <= set(PROCESSORS)


def test_with_membership_the_embedded_projections_run_on_the_projections_node_only(tmp_path: Path) -> None:
    every = node_processor_names(Settings(data_dir=tmp_path, transcript_vectors=True))
    assert {"clickhouse-projection", "qdrant-projection", "transcript-vectors"} <= set(every)
    member = Settings(data_dir=tmp_path, transcript_vectors=True, membership=True, admin_token=SecretStr("t"))
    assert node_processor_names(member) == ["flush", "summarizer", "thresholds"]
    assert node_processor_names(member.model_copy(update={"projections_node": True})) == every
    with_server = member.model_copy(update={"qdrant_url": "http://qdrant:6333"})  # ClickHouse embedded
    assert node_processor_names(with_server) == ["flush", "qdrant-projection", "summarizer", "thresholds"]
    chosen = member.model_copy(update={"node_processors": ["clickhouse-projection", "flush"]})
    assert node_processor_names(chosen) == ["flush"]
