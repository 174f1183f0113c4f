"""apply_topics against real brokers: Tansu (always) and Apache Kafka (--kafka)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from core.config import Settings
from memstream.embedded.process import free_port
from streams.admin import TopicAdminError, apply_topics
from streams.topics import TopicRegistry, load_topics


@pytest.fixture
def broker_settings(broker: str, topic_prefix: str, tmp_path: Any) -> Settings:
    return Settings(data_dir=tmp_path, broker_url=f"kafka://{broker}", topic_prefix=topic_prefix)


@pytest.fixture
def registry() -> TopicRegistry:
    return load_topics().with_dead_letter("summarizer")


def tier(request: pytest.FixtureRequest) -> str:
    return str(request.node.callspec.params["broker"])


def admin(settings: Settings) -> AdminClient:
    return AdminClient({"bootstrap.servers": settings.broker_bootstrap})


def describe(settings: Settings, broker_name: str) -> dict[str, str]:
    resource = ConfigResource(ResourceType.TOPIC, broker_name)
    client = admin(settings)  # keep the client alive until its future resolves
    entries = client.describe_configs([resource])[resource].result(timeout=10)
    return {name: entry.value for name, entry in entries.items()}


def wait_for_config(
    settings: Settings, broker_name: str, key: str, value: str, timeout: float = 15.0
) -> None:
    """Kafka applies config changes through its metadata log: a describe right after an alter can
    still show the old value for a moment."""
    deadline = time.monotonic() + timeout
    while (seen := describe(settings, broker_name).get(key)) != value:
        assert time.monotonic() < deadline, f"{broker_name} {key} is {seen!r}, expected {value!r}"
        time.sleep(0.1)


def partitions(settings: Settings, broker_name: str) -> int:
    return len(admin(settings).list_topics(broker_name, timeout=10).topics[broker_name].partitions)


def test_creates_every_topic_then_reapplying_is_a_noop(
    broker_settings: Settings, registry: TopicRegistry
) -> None:
    first = apply_topics(broker_settings, registry)
    assert first.created == registry.names()
    assert "journal.messages" in first.created and "dlq.summarizer" in first.created
    assert first.was_created("journal.messages") and first.changed
    assert not first.unsupported
    for spec in registry:
        name = spec.broker_name(broker_settings)
        assert partitions(broker_settings, name) == spec.partitions
        configs = describe(broker_settings, name)
        assert {k: configs.get(k) for k in spec.config} == dict(spec.config)

    second = apply_topics(broker_settings, registry)
    assert second.unchanged == registry.names()
    assert second.created == () and second.updated == () and not second.changed
    assert not second.was_created("journal.messages")
    assert "unchanged" in second.render()


def test_config_drift_is_corrected(broker_settings: Settings, registry: TopicRegistry) -> None:
    apply_topics(broker_settings, registry)
    name = broker_settings.topic("journal.messages")
    drift = [ConfigEntry("retention.ms", "1000", incremental_operation=AlterConfigOpType.SET)]
    resource = ConfigResource(ResourceType.TOPIC, name, incremental_configs=drift)
    client = admin(broker_settings)
    client.incremental_alter_configs([resource])[resource].result(timeout=10)
    wait_for_config(broker_settings, name, "retention.ms", "1000")

    report = apply_topics(broker_settings, registry)
    assert report.updated == ("journal.messages",)
    assert report.unchanged == tuple(n for n in registry.names() if n != "journal.messages")
    declared = registry.get("journal.messages").config["retention.ms"]
    assert report.result("journal.messages").changes == (f"config retention.ms 1000 -> {declared}",)
    wait_for_config(broker_settings, name, "retention.ms", declared)
    assert not apply_topics(broker_settings, registry).changed


def test_partition_increase_or_a_clear_unsupported_report(
    request: pytest.FixtureRequest, broker_settings: Settings, registry: TopicRegistry
) -> None:
    spec = registry.get("journal.messages")
    name = spec.broker_name(broker_settings)
    client = admin(broker_settings)
    client.create_topics([NewTopic(name, 1, 1, config=dict(spec.config))])[name].result(timeout=10)

    report = apply_topics(broker_settings, registry)
    assert report.created == tuple(n for n in registry.names() if n != "journal.messages")
    result = report.result("journal.messages")
    if tier(request) == "kafka":
        assert result.action == "updated"
        assert result.changes == (f"partitions 1 -> {spec.partitions}",)
        deadline = time.monotonic() + 15  # metadata follows CreatePartitions shortly after
        while partitions(broker_settings, name) != spec.partitions:
            assert time.monotonic() < deadline, "the partition increase never showed in the metadata"
            time.sleep(0.1)
        assert not apply_topics(broker_settings, registry).changed
    else:  # Tansu refuses CreatePartitions
        assert result.action == "unchanged"
        assert result.unsupported == (
            f"partition increase not supported by this broker (partitions 1 -> {spec.partitions})",
        )
        assert report.unsupported == ("journal.messages",)
        assert partitions(broker_settings, name) == 1
        assert "! partition increase not supported" in report.render()


def test_fewer_declared_partitions_are_reported_not_applied(
    broker_settings: Settings, registry: TopicRegistry
) -> None:
    spec = registry.get("dlq.summarizer")
    name = spec.broker_name(broker_settings)
    client = admin(broker_settings)
    client.create_topics([NewTopic(name, 3, 1, config=dict(spec.config))])[name].result(timeout=10)
    result = apply_topics(broker_settings, registry).result("dlq.summarizer")
    assert result.action == "unchanged"
    assert result.unsupported == ("has 3 partitions, 1 declared: partitions cannot be removed",)


def test_only_the_given_topics_are_applied(broker_settings: Settings, registry: TopicRegistry) -> None:
    report = apply_topics(broker_settings, registry, topics=[registry.dlq_topic("summarizer")])
    assert report.created == ("dlq.summarizer",)
    topics = admin(broker_settings).list_topics(timeout=10).topics
    assert broker_settings.topic("journal.messages") not in topics


def test_unreachable_broker_raises_a_clear_error(tmp_path: Any) -> None:
    settings = Settings(data_dir=tmp_path, broker_url=f"kafka://127.0.0.1:{free_port()}")
    with pytest.raises(TopicAdminError, match="cannot reach the broker"):
        apply_topics(settings, load_topics(), timeout=1.0)


def test_replication_factor_override_is_checked(tmp_path: Any) -> None:
    with pytest.raises(ValueError, match="replication_factor"):
        apply_topics(Settings(data_dir=tmp_path), load_topics(), replication_factor=0)


@pytest.mark.kafka
def test_settings_replication_factor_reaches_the_broker(
    kafka_bootstrap: str, topic_prefix: str, tmp_path: Any
) -> None:
    """A single-broker Kafka refuses replication factor 2: proof the setting is what was asked for."""
    settings = Settings(
        data_dir=tmp_path,
        broker_url=f"kafka://{kafka_bootstrap}",
        topic_prefix=topic_prefix,
        topic_replication_factor=2,
    )
    with pytest.raises(TopicAdminError, match=r"(?i)replication"):
        apply_topics(settings, load_topics())
