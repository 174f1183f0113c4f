"""topics.yaml and its registry: loading, checks, schema validation, dead-letter topics."""

from __future__ import annotations

import copy
import tomllib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from core.config import Settings
from core.journal.models import Message, NewMessage, ToolCall
from streams.codecs import journal_messages
from streams.topics import (
    DEFAULT_TOPICS_PATH,
    InvalidPayload,
    TopicsFileError,
    UndeclaredTopic,
    default_registry,
    dlq_topic,
    load_topics,
    topic_name,
)

ROOT = Path(__file__).resolve().parents[2]


def raw_file() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(DEFAULT_TOPICS_PATH.read_text())
    return data


def write(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "topics.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


# ---------------------------------------------------------------- the shipped file


def test_canonical_file_ships_with_streams_and_root_links_to_it() -> None:
    assert DEFAULT_TOPICS_PATH == ROOT / "streams" / "topics.yaml"
    assert DEFAULT_TOPICS_PATH.is_file() and not DEFAULT_TOPICS_PATH.is_symlink()
    root = ROOT / "topics.yaml"
    assert root.is_symlink() and root.resolve() == DEFAULT_TOPICS_PATH
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "topics.yaml" in package_data["streams"]


def test_shipped_registry_declares_the_journal_topic() -> None:
    registry = load_topics()
    assert registry.names()[0] == "journal.messages"
    assert "dlq.qdrant-projection" in registry.names()  # shipped processors declare their DLQ
    spec = registry.get("journal.messages")
    assert spec.partitions >= 1 and spec.replication_factor == 1
    assert spec.schema_version == 1
    assert spec.headers.keys() == {"message_id", "shard", "seq", "prev_seq", "partitions"}
    assert spec.config["cleanup.policy"] == "delete"
    assert default_registry() is default_registry()


def test_every_example_payload_validates() -> None:
    registry = load_topics().with_dead_letter("never-listed")
    checked = 0
    for spec in registry:
        assert spec.examples, f"{spec.name} has no example"
        for example in spec.examples:
            registry.validate(spec.name, example)
            checked += 1
    assert checked >= 4


def test_a_broken_example_fails_loading(tmp_path: Path) -> None:
    data = raw_file()
    data["topics"][0]["examples"][1]["offset"] = -1
    with pytest.raises(TopicsFileError, match=r"journal.messages.*examples\[1\].*offset"):
        load_topics(write(tmp_path, data))


def test_a_broken_dead_letter_example_fails_loading(tmp_path: Path) -> None:
    data = raw_file()
    del data["dead_letter"]["examples"][0]["reason"]
    with pytest.raises(TopicsFileError, match=r"dead_letter.*examples\[0\].*reason"):
        load_topics(write(tmp_path, data))


def test_journal_max_message_bytes_fits_the_largest_journal_message() -> None:
    """A message at the journal's size limit, with the longest ids, still fits the topic limit."""
    limit = Settings().journal_max_message_bytes
    big_id = "x" * 128
    overhead = len(NewMessage(role="user", content="a").model_dump_json()) - 1
    message = Message(
        message_id=big_id,
        environment="e" * 32,
        account_id=big_id,
        agent_id=big_id,
        user_id=big_id,
        thread_id=big_id,
        offset=2**62,
        seq=2**62,
        role="user",
        content="y" * (limit - overhead),
        created_at=datetime.now(UTC),
        token_count=2**31,
    )
    event = journal_messages.encode(message)
    record_size = len(event.value) + len(event.key) + sum(len(k) + len(v or b"") for k, v in event.headers)
    topic_limit = load_topics().get("journal.messages").max_message_bytes
    assert topic_limit is not None
    assert record_size + 1024 < topic_limit


# ---------------------------------------------------------------- lookups and validation


def test_undeclared_topic_raises() -> None:
    registry = load_topics()
    with pytest.raises(UndeclaredTopic, match=r"no\.such\.topic"):
        registry.get("no.such.topic")
    with pytest.raises(UndeclaredTopic):
        topic_name(Settings(), "journal.message")
    assert "journal.messages" in registry and "nope" not in registry


def test_topic_name_is_prefixed() -> None:
    assert topic_name(Settings(topic_prefix="t1."), "journal.messages") == "t1.journal.messages"
    assert topic_name(Settings(), "journal.messages") == "journal.messages"


def _example() -> dict[str, Any]:
    return copy.deepcopy(dict(load_topics().get("journal.messages").examples[0]))


@pytest.mark.parametrize(
    ("change", "where"),
    [
        (lambda p: p.pop("thread_id"), "$"),
        (lambda p: p.update(offset="3"), "$.offset"),
        (lambda p: p.update(schema_version=2), "$.schema_version"),
        (lambda p: p.update(role="robot"), "$.role"),
        (lambda p: p.update(extra=1), "$"),
        (lambda p: p.update(thread_id="has space"), "$.thread_id"),
        (lambda p: p.update(created_at="yesterday"), "$.created_at"),
        (lambda p: p.update(tool_call={"id": "c1"}), "$.tool_call"),
    ],
)
def test_validate_rejects_bad_payloads(change: Any, where: str) -> None:
    payload = _example()
    change(payload)
    with pytest.raises(InvalidPayload) as info:
        load_topics().validate("journal.messages", payload)
    assert info.value.field == where
    assert info.value.topic == "journal.messages"


def test_validate_unknown_topic_raises() -> None:
    with pytest.raises(UndeclaredTopic):
        load_topics().validate("no.such.topic", {})


def test_a_model_message_validates() -> None:
    message = Message(
        message_id="m1",
        environment="dev",
        account_id="a",
        agent_id="g",
        user_id=None,
        thread_id="t",
        offset=0,
        seq=1,
        role="assistant",
        content="",
        tool_call=ToolCall(id="c", name="f", arguments="{}"),
        created_at=datetime.now(UTC),
        token_count=1,
    )
    import json

    payload = json.loads(journal_messages.encode(message).value)
    topics = load_topics()
    assert topics.validate("journal.messages", payload) is None  # type: ignore[func-returns-value]
    assert payload["tool_call"] == {"id": "c", "name": "f", "arguments": "{}", "result": None}
    with pytest.raises(InvalidPayload):  # the schema does check what this message carries
        topics.validate("journal.messages", {**payload, "offset": "0"})


# ---------------------------------------------------------------- dead-letter topics


def test_dlq_topic_requires_a_listed_processor() -> None:
    with pytest.raises(UndeclaredTopic, match=r"dead_letter\.processors"):
        dlq_topic("never-listed", registry=load_topics())


def test_dlq_topic_is_built_from_the_template() -> None:
    registry = load_topics().with_dead_letter("never-listed", "also-never-listed")
    spec = registry.dlq_topic("never-listed")
    template = registry.dead_letter.template
    assert spec.name == "dlq.never-listed" and spec.dead_letter_of == "never-listed"
    assert spec.config == template.config and spec.partitions == template.partitions
    assert spec.broker_name(Settings(topic_prefix="p.")) == "p.dlq.never-listed"
    assert registry.names()[-2:] == ("dlq.never-listed", "dlq.also-never-listed")
    assert registry.get("dlq.also-never-listed").dead_letter_of == "also-never-listed"
    registry.validate("dlq.never-listed", spec.examples[0])
    with pytest.raises(InvalidPayload):
        registry.validate("dlq.never-listed", {**spec.examples[0], "processor": "Bad Name"})


def test_processors_listed_in_the_file_declare_their_dlq(tmp_path: Path) -> None:
    data = raw_file()
    data["dead_letter"]["processors"] = ["never-listed"]
    registry = load_topics(write(tmp_path, data))
    assert registry.dlq_topic("never-listed").name == "dlq.never-listed"
    assert "dlq.never-listed" in registry.names()


@pytest.mark.parametrize("processor", ["", "Summarizer", "a.b", "1st", "x" * 64])
def test_ill_formed_processor_names_are_refused(processor: str) -> None:
    with pytest.raises(ValueError, match="processor name"):
        load_topics().with_dead_letter(processor)


def test_processor_pattern_matches_the_schema() -> None:
    registry = load_topics()
    schema_pattern = registry.dead_letter.template.schema["properties"]["processor"]["pattern"]
    assert schema_pattern == registry.dead_letter.processor_pattern.pattern


# ---------------------------------------------------------------- malformed files


def _broken(data: dict[str, Any], edit: str) -> dict[str, Any]:
    topic = data["topics"][0]
    if edit == "duplicate":
        data["topics"].append(copy.deepcopy(topic))
    elif edit == "bad_schema":
        topic["schema"]["type"] = "nonsense"
    elif edit == "version_mismatch":
        topic["schema_version"] = 2
    elif edit == "bad_name":
        topic["name"] = "Journal Messages"
    elif edit == "unknown_field":
        topic["retention"] = "7d"
    elif edit == "no_examples":
        topic["examples"] = []
    elif edit == "bad_config_value":
        topic["config"]["retention.ms"] = [1]
    elif edit == "bad_pattern":
        data["dead_letter"]["name_pattern"] = "dlq"
    elif edit == "bad_listed_processor":
        data["dead_letter"]["processors"] = ["Not Valid"]
    return data


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ("duplicate", "declared twice"),
        ("bad_schema", "not valid JSON Schema"),
        ("version_mismatch", "schema_version"),
        ("bad_name", "topics.0.name"),
        ("unknown_field", "retention"),
        ("no_examples", "examples"),
        ("bad_config_value", "config"),
        ("bad_pattern", "{processor}"),
        ("bad_listed_processor", "processor name"),
    ],
)
def test_malformed_files_are_refused(tmp_path: Path, edit: str, message: str) -> None:
    with pytest.raises(TopicsFileError, match=message.replace(".", r"\.").replace("{", r"\{")):
        load_topics(write(tmp_path, _broken(raw_file(), edit)))


def test_unreadable_or_invalid_yaml_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TopicsFileError, match="cannot read"):
        load_topics(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("topics: [\n")
    with pytest.raises(TopicsFileError, match="not valid YAML"):
        load_topics(bad)


def test_config_values_are_normalised_to_strings(tmp_path: Path) -> None:
    data = raw_file()
    data["topics"][0]["config"] = {"retention.ms": 1000, "unclean.leader.election.enable": False}
    spec = load_topics(write(tmp_path, data)).get("journal.messages")
    assert spec.config == {"retention.ms": "1000", "unclean.leader.election.enable": "false"}
