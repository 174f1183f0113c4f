"""`memory.entries` (schema in topics.yaml), compacted: key `environment/account_id/entry_id` as
UTF-8 bytes (`core.memory.models.entry_key`); value the JSON of a `core.memory.models.EntryEvent`
for an upsert, no value (a tombstone) for a delete.

The outbox (Postgres) holds each record's value as JSON already: `encode_value` turns it into the
record's bytes. `decode` checks that the key is well formed and names the value's entry.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from core.memory.models import EntryEvent, entry_key, parse_entry_key
from streams.codecs.errors import InvalidEvent, first_error
from streams.codecs.records import EncodedEvent

TOPIC = "memory.entries"


@dataclass(frozen=True, slots=True)
class EntryRecord:
    """A decoded record: the entry it is about and its event, None for a tombstone (a delete)."""

    environment: str
    account_id: str
    entry_id: str
    event: EntryEvent | None


def encode_value(value: Any) -> bytes | None:
    """The record value of an outbox row's `value` (None -> a tombstone)."""
    if value is None:
        return None
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")


def encode(event: EntryEvent) -> EncodedEvent:
    """The upsert record of `event`."""
    entry = event.entry
    return EncodedEvent(
        key=entry_key(entry.environment, entry.account_id, entry.entry_id).encode("utf-8"),
        value=event.model_dump_json().encode("utf-8"),
        headers=[],
    )


def decode(key: bytes | None, value: bytes | None) -> EntryRecord:
    """The record of `key` and `value`; `InvalidEvent` when the key is malformed, the value is not an
    `EntryEvent`, or the value's entry is not the key's."""
    try:
        text = (key or b"").decode("utf-8")
        environment, account_id, entry_id = parse_entry_key(text)
    except (UnicodeDecodeError, ValueError) as exc:
        raise InvalidEvent(f"bad {TOPIC} key: {exc}") from exc
    if value is None:
        return EntryRecord(environment, account_id, entry_id, None)
    try:
        event = EntryEvent.model_validate_json(value)
    except ValidationError as exc:
        raise InvalidEvent(f"bad EntryEvent value: {first_error(exc)}") from exc
    entry = event.entry
    if (entry.environment, entry.account_id, entry.entry_id) != (environment, account_id, entry_id):
        raise InvalidEvent(
            f"EntryEvent of {entry.environment}/{entry.account_id}/{entry.entry_id} under key {text!r}"
        )
    return EntryRecord(environment, account_id, entry_id, event)
