"""The identity of a topic on a broker: its Kafka topic id, new whenever the topic is created anew.

A durable position "published up to X" is only true for the topic it was confirmed on. The
memory-only embedded broker recreates its topics after a restart, and a second node publishes the
same journal to its own broker; both show as a different topic id under the same name (Tansu and
Apache Kafka both hand out a fresh id per creation). `topic_identity` reads it (None when the topic
does not exist); `fingerprint` turns it into a positive 56-bit number, to store beside an integer
cursor.

`topic_identity` is synchronous (confluent-kafka's admin client): from async code run it with
`asyncio.to_thread`. An unreachable broker raises `TopicAdminError`.
"""

from __future__ import annotations

import hashlib

from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient

from streams.admin import TopicAdminError

_MISSING = {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError.UNKNOWN_TOPIC_ID}


def topic_identity(bootstrap: str, broker_name: str, *, timeout: float = 10.0) -> str | None:
    """The topic id of `broker_name` on the broker at `bootstrap` (module doc); None when missing."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    future = admin.describe_topics(TopicCollection([broker_name]), request_timeout=timeout)[broker_name]
    try:
        description = future.result(timeout=timeout + 1)
    except KafkaException as exc:
        error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
        if error is not None and error.code() in _MISSING:
            return None
        raise TopicAdminError(f"cannot describe topic {broker_name} on {bootstrap}: {exc}") from None
    except TimeoutError:
        raise TopicAdminError(f"cannot describe topic {broker_name} on {bootstrap}: timed out") from None
    return str(description.topic_id)


def fingerprint(identity: str) -> int:
    """A positive number (1 .. 2**56) standing for `identity`."""
    return int.from_bytes(hashlib.sha256(identity.encode("utf-8")).digest()[:7], "big") + 1
