"""The `memory.entries` codec: the examples of topics.yaml, round trips, keys, tombstones."""

from __future__ import annotations

import json
from typing import Any

import pytest

from core.memory.models import EntryEvent, entry_key
from streams.codecs.errors import InvalidEvent
from streams.codecs.memory_entries import decode, encode, encode_value
from streams.topics import default_registry

TOPIC = "memory.entries"
EXAMPLES = default_registry().get(TOPIC).examples


def key_of(example: dict[str, Any]) -> bytes:
    entry = example["entry"]
    return entry_key(entry["environment"], entry["account_id"], entry["entry_id"]).encode()


@pytest.mark.parametrize("example", EXAMPLES)
def test_every_example_decodes_and_round_trips(example: dict[str, Any]) -> None:
    value = encode_value(example)
    assert value is not None
    record = decode(key_of(example), value)
    assert record.event is not None
    assert (record.environment, record.account_id, record.entry_id) == (
        example["entry"]["environment"],
        example["entry"]["account_id"],
        example["entry"]["entry_id"],
    )
    event = encode(record.event)
    assert event.key == key_of(example)
    assert decode(event.key, event.value) == record
    default_registry().validate(TOPIC, json.loads(event.value))


def test_a_tombstone_names_its_entry() -> None:
    record = decode(b"dev/acme/0b6f6f5e-3c1e-4c38-9a55-3f4f2f0c9d11", None)
    assert (record.environment, record.account_id, record.event) == ("dev", "acme", None)
    assert encode_value(None) is None


def test_outbox_values_are_compact_utf8_json() -> None:
    assert encode_value({"content": "héllo", "n": 1}) == '{"content":"héllo","n":1}'.encode()


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        (None, None, "bad memory.entries key"),
        (b"dev/acme", None, "bad memory.entries key"),
        (b"\xff/a/b", None, "bad memory.entries key"),
        (b"dev/acme/x", b"not json", "bad EntryEvent value"),
        (b"dev/acme/x", json.dumps({**EXAMPLES[0], "version": 0}).encode(), "bad EntryEvent value"),
        (key_of(dict(EXAMPLES[1])), json.dumps(EXAMPLES[0]).encode(), "under key"),
    ],
)
def test_what_cannot_be_projected_is_invalid(key: bytes | None, value: bytes | None, reason: str) -> None:
    with pytest.raises(InvalidEvent, match=reason):
        decode(key, value)


def test_an_event_model_encodes_to_its_key() -> None:
    event = EntryEvent.model_validate(EXAMPLES[0])
    assert encode(event).key == key_of(dict(EXAMPLES[0]))
