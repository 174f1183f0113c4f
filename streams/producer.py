"""confluent-kafka producers with memstream's delivery guarantees.

`producer_config` gives an idempotent producer (`enable.idempotence`, `acks=all`): per partition,
records are written once each and in produce order, even across internal retries. The local
delivery timeout is infinite by default (`message.timeout.ms=0`): while the broker is away,
records wait and are retried instead of expiring, because an expired record would leave a gap
that a later retry fills out of order. Callers that must stop waiting purge the producer.

`message.max.bytes` is the largest `max.message.bytes` declared in topics.yaml, so every record a
topic accepts can also be produced.

Producers never create topics (`allow.auto.create.topics=false`): a broker such as Tansu would
otherwise auto-create a missing topic with its own partition count and no declared config. A
record for a missing topic fails with UNKNOWN_TOPIC_OR_PART after
`topic.metadata.propagation.max.ms` (5 s); `memstream topics apply` creates topics.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Producer

from memstream.config import Settings
from streams.topics import TopicRegistry, default_registry

RECORD_OVERHEAD_BYTES = 64 * 1024
"""Headroom above the largest topic limit for the batch envelope and headers."""


def producer_config(
    settings: Settings,
    *,
    client_id: str,
    registry: TopicRegistry | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """librdkafka settings for an idempotent, ordered, never-expiring producer (see module doc)."""
    limits = [spec.max_message_bytes or 0 for spec in (registry or default_registry())]
    config: dict[str, Any] = {
        "bootstrap.servers": settings.broker_bootstrap,
        "client.id": client_id,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 2,
        "message.timeout.ms": 0,
        "message.max.bytes": max([1_000_000, *limits]) + RECORD_OVERHEAD_BYTES,
        "socket.keepalive.enable": True,
        "allow.auto.create.topics": False,
        "topic.metadata.propagation.max.ms": 5000,
    }
    config.update(overrides or {})
    return config


def make_producer(
    settings: Settings,
    *,
    client_id: str,
    registry: TopicRegistry | None = None,
    overrides: Mapping[str, Any] | None = None,
    logger: logging.Logger | None = None,
) -> Producer:
    """A `confluent_kafka.Producer` with `producer_config`; librdkafka logs go to `logger`."""
    config = producer_config(settings, client_id=client_id, registry=registry, overrides=overrides)
    if logger is not None:
        config["logger"] = logger
    return Producer(config)
