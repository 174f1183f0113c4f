"""`journal.messages` (schema in topics.yaml):
- key: `thread_id` as UTF-8 bytes;
- value: the JSON of `core.journal.models.Message` with `"schema_version": 1` added (`shard` only
  when it is not 0: `Message.stored_json`; a record without it is of shard 0, as every record
  written before shards existed);
- header `message_id`: the message id as UTF-8 bytes (the relay adds the progress headers `shard`,
  `seq`, `prev_seq` and `partitions`: `streams.sequencing`).

`encode` is on the relay's hot path and does not validate against the JSON schema (the `Message`
model already guarantees it; tests check every encoded payload against topics.yaml). `decode` is
strict: anything that is not a valid version-1 payload raises `InvalidEvent` (or its subclass
`UnsupportedSchemaVersion`). A value as `encode` writes it is parsed by the model in one step
(half the cost of `json.loads` + `model_validate`); whatever that refuses takes the full path, so
what is accepted and every error are the same. The key is not checked here (a consumer that
relies on it checks it).
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from core.journal.models import Message
from streams.codecs.errors import InvalidEvent, UnsupportedSchemaVersion
from streams.codecs.records import EncodedEvent

TOPIC = "journal.messages"
SCHEMA_VERSION = 1
MESSAGE_ID_HEADER = "message_id"

_VERSION_PREFIX = b'{"schema_version":%d,' % SCHEMA_VERSION


def encode(message: Message) -> EncodedEvent:
    """The record of `message` (key thread_id, JSON value, message_id header)."""
    body = message.stored_json()
    return EncodedEvent(
        key=message.thread_id.encode("utf-8"),
        value=_VERSION_PREFIX + body[1:],
        headers=[(MESSAGE_ID_HEADER, message.message_id.encode("utf-8"))],
    )


def payload(message: Message) -> dict[str, Any]:
    """The decoded JSON value of `message`'s record (what the schema in topics.yaml describes)."""
    value: dict[str, Any] = json.loads(encode(message).value)
    return value


def decode(value: bytes | str | None) -> Message:
    """The message of a record value; `InvalidEvent` / `UnsupportedSchemaVersion` if it is not one."""
    if value is None:
        raise InvalidEvent(f"{TOPIC} record has no value (a tombstone?)")
    if isinstance(value, bytes) and value.startswith(_VERSION_PREFIX):
        try:  # what `encode` wrote: the model's own JSON after the version, parsed in one step
            return Message.model_validate_json(b"{" + value[len(_VERSION_PREFIX) :])
        except ValidationError:
            pass  # anything it refuses gets the checks and the error of the full path below
    try:
        parsed = json.loads(value)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidEvent(f"{TOPIC} value is not JSON: {exc}") from None
    if not isinstance(parsed, dict):
        raise InvalidEvent(f"{TOPIC} value must be a JSON object, not {type(parsed).__name__}")
    version = parsed.pop("schema_version", None)
    if version != SCHEMA_VERSION:
        raise UnsupportedSchemaVersion(
            f"{TOPIC} schema_version {version!r} is not supported (this code reads {SCHEMA_VERSION})"
        )
    try:
        return Message.model_validate(parsed)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "value"
        raise InvalidEvent(f"{TOPIC} value is invalid at {where}: {first['msg']}") from None
