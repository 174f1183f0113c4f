"""Records as the codecs produce them and headers as the Kafka clients give them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

Headers = Sequence[tuple[str, bytes | None]]
"""Kafka headers as confluent-kafka gives and takes them."""


@dataclass(frozen=True, slots=True)
class EncodedEvent:
    """What goes to the producer: `producer.produce(topic, value, key, headers=headers)`."""

    key: bytes
    value: bytes
    headers: list[tuple[str, str | bytes | None]]


def header(headers: Headers | None, name: str) -> bytes | None:
    """The value of the first header called `name`, or None."""
    for key, value in headers or ():
        if key == name:
            return value
    return None
