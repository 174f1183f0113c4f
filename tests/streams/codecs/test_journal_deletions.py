"""`journal.deletions` codec: the topics.yaml examples decode, encode round-trips and validates
against the schema, and what the schema refuses (or a key naming another thread) is invalid."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from core.stores.deletions import Tombstone
from streams.codecs import journal_deletions
from streams.codecs.errors import InvalidEvent, UnsupportedSchemaVersion
from streams.topics import default_registry

pytestmark = pytest.mark.unit

TOPIC = default_registry().get(journal_deletions.TOPIC)


def test_the_examples_decode() -> None:
    for example in TOPIC.examples:
        key = journal_deletions.key_of(example["environment"], example["account_id"], example["thread_id"])
        event = journal_deletions.decode(key, json.dumps(example).encode())
        assert event.tombstone.up_to_seq == example["up_to_seq"]


def test_encode_round_trips_and_matches_the_schema() -> None:
    tombstone = Tombstone("dev", "acme", "th-1", 42)
    encoded = journal_deletions.encode(3, tombstone, datetime(2026, 12, 2, 7, tzinfo=UTC))
    assert encoded.key == b"dev/acme/th-1"
    TOPIC.validate(json.loads(encoded.value))
    event = journal_deletions.decode(encoded.key, encoded.value)
    assert (event.deletion_id, event.tombstone, event.requested_at) == (3, tombstone, "2026-12-02T07:00:00Z")


@pytest.mark.parametrize(
    "change",
    [
        {"up_to_seq": -1},
        {"thread_id": "bad/id"},
        {"extra": 1},
        {"deletion_id": 0},
        {"requested_at": "yesterday"},
    ],
)
def test_what_the_schema_refuses_is_invalid(change: dict[str, object]) -> None:
    value = {**TOPIC.examples[0], **change}
    with pytest.raises(InvalidEvent):
        journal_deletions.decode(None, json.dumps(value).encode())


def test_other_versions_keys_and_values_are_refused() -> None:
    example = TOPIC.examples[0]
    with pytest.raises(UnsupportedSchemaVersion):
        journal_deletions.decode(None, json.dumps({**example, "schema_version": 2}).encode())
    with pytest.raises(InvalidEvent):
        journal_deletions.decode(b"dev/acme/other", json.dumps(example).encode())
    with pytest.raises(InvalidEvent):
        journal_deletions.decode(None, None)
    with pytest.raises(InvalidEvent):
        journal_deletions.decode(None, b"[1]")
