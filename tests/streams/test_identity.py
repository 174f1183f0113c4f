"""Topic identity (streams.identity) on the real brokers: a topic created anew is another topic."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from memstream.embedded.process import free_port
from streams.admin import TopicAdminError
from streams.identity import fingerprint, topic_identity


def create(admin: AdminClient, topic: str) -> None:
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(timeout=20)
    time.sleep(0.5)


def test_a_topic_created_anew_has_another_identity(broker: str) -> None:
    topic = f"t{uuid.uuid4().hex[:10]}.identity"
    admin = AdminClient({"bootstrap.servers": broker})
    assert topic_identity(broker, topic) is None
    create(admin, topic)
    first = topic_identity(broker, topic)
    assert first is not None and topic_identity(broker, topic) == first
    admin.delete_topics([topic])[topic].result(timeout=20)
    deadline = time.monotonic() + 20
    while topic_identity(broker, topic) is not None:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    create(admin, topic)
    second = topic_identity(broker, topic)
    assert second is not None and second != first
    assert fingerprint(first) != fingerprint(second)
    assert all(0 < fingerprint(x) <= 2**56 for x in (first, second))
    admin.delete_topics([topic])[topic].result(timeout=20)


def test_an_unreachable_broker_is_an_error_not_a_missing_topic() -> None:
    with pytest.raises(TopicAdminError, match="cannot describe topic"):
        topic_identity(f"127.0.0.1:{free_port()}", "t.any", timeout=1.0)
