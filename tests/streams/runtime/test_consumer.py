"""The runtime's consumers never create topics: a consumer of a topic the broker lacks leaves it
missing (Tansu would otherwise create it on the consumer's metadata request, with 4 partitions,
before the node applies topics.yaml), and consumes it once topics.yaml is applied."""

from __future__ import annotations

import asyncio
import time

from confluent_kafka.admin import AdminClient

from core.config import Settings
from streams.admin import apply_topics
from streams.identity import topic_identity
from streams.runtime import ProcessorRuntime, RuntimeOptions
from streams.topics import default_registry
from tests.streams.runtime.support import TOPIC, PgWriter, produce, wait_for_effects


def partitions_of(settings: Settings, topic: str) -> int:
    metadata = AdminClient({"bootstrap.servers": settings.broker_bootstrap}).list_topics(timeout=10)
    return len(metadata.topics[topic].partitions)


async def test_a_consumer_of_a_missing_topic_does_not_create_it(
    rt_settings: Settings, rt_options: RuntimeOptions, effects_dsn: str
) -> None:
    registry = default_registry().with_dead_letter("writer")
    apply_topics(rt_settings, registry, topics=[registry.dlq_topic("writer")])  # not the source topic
    topic = rt_settings.topic(TOPIC)
    runtime = ProcessorRuntime(PgWriter("writer", effects_dsn), rt_settings, rt_options, registry=registry)
    await runtime.start()
    try:
        deadline = time.monotonic() + 6  # the consumer joins its group and asks for metadata meanwhile
        while time.monotonic() < deadline:
            assert topic_identity(rt_settings.broker_bootstrap, topic) is None, "a consumer created the topic"
            await asyncio.sleep(0.5)
        apply_topics(rt_settings, registry, topics=[registry.get(TOPIC)])
        assert partitions_of(rt_settings, topic) == registry.get(TOPIC).partitions
        produce(rt_settings, [{"id": i} for i in range(20)])
        assert await wait_for_effects(effects_dsn, "writer", 20, within_s=60) == list(range(20))
        assert not runtime.crashed.is_set(), runtime.error
    finally:
        await runtime.stop()
