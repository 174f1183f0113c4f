"""Wire format of the events on memstream topics: journal messages and dead-letter records.

`journal.messages` (schema in topics.yaml):
- key: `thread_id` as UTF-8 bytes;
- value: the JSON of `core.journal.models.Message` with `"schema_version": 1` added;
- header `message_id`: the message id as UTF-8 bytes (the relay adds the progress headers `seq`,
  `prev_seq` and `partitions`: `streams.sequencing`).

`encode_message` is on the relay's hot path and does not validate against the JSON schema (the
`Message` model already guarantees it; tests check every encoded payload against topics.yaml).
`decode_message` is strict: anything that is not a valid version-1 payload raises `InvalidEvent`
(or its subclass `UnsupportedSchemaVersion`), which a processor sends to its dead-letter topic.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from core.errors import MemstreamError
from core.journal.models import Message

MESSAGE_SCHEMA_VERSION = 1
DEAD_LETTER_SCHEMA_VERSION = 1
MESSAGE_ID_HEADER = "message_id"

Headers = Sequence[tuple[str, bytes | None]]
"""Kafka headers as confluent-kafka gives and takes them."""

_VERSION_PREFIX = b'{"schema_version":%d,' % MESSAGE_SCHEMA_VERSION


class InvalidEvent(MemstreamError):
    """A record on a topic is not a valid event of that topic (bad JSON, wrong fields)."""

    code = "invalid_event"


class UnsupportedSchemaVersion(InvalidEvent):
    """A record carries a `schema_version` this code does not read."""

    code = "unsupported_schema_version"


@dataclass(frozen=True, slots=True)
class EncodedEvent:
    """What goes to the producer: `producer.produce(topic, value, key, headers=headers)`."""

    key: bytes
    value: bytes
    headers: list[tuple[str, str | bytes | None]]


def encode_message(message: Message) -> EncodedEvent:
    """The `journal.messages` record of `message` (key thread_id, JSON value, message_id header)."""
    body = message.model_dump_json().encode("utf-8")
    return EncodedEvent(
        key=message.thread_id.encode("utf-8"),
        value=_VERSION_PREFIX + body[1:],
        headers=[(MESSAGE_ID_HEADER, message.message_id.encode("utf-8"))],
    )


def message_payload(message: Message) -> dict[str, Any]:
    """The decoded JSON value of `message`'s record (what the schema in topics.yaml describes)."""
    payload: dict[str, Any] = json.loads(encode_message(message).value)
    return payload


def decode_message(value: bytes | str | None) -> Message:
    """Parse a `journal.messages` value; `InvalidEvent` / `UnsupportedSchemaVersion` if it is not one."""
    if value is None:
        raise InvalidEvent("journal.messages record has no value (a tombstone?)")
    try:
        payload = json.loads(value)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidEvent(f"journal.messages value is not JSON: {exc}") from None
    if not isinstance(payload, dict):
        raise InvalidEvent(f"journal.messages value must be a JSON object, not {type(payload).__name__}")
    version = payload.pop("schema_version", None)
    if version != MESSAGE_SCHEMA_VERSION:
        raise UnsupportedSchemaVersion(
            f"journal.messages schema_version {version!r} is not supported (this code reads "
            f"{MESSAGE_SCHEMA_VERSION})"
        )
    try:
        return Message.model_validate(payload)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "value"
        raise InvalidEvent(f"journal.messages value is invalid at {where}: {first['msg']}") from None


def header(headers: Headers | None, name: str) -> bytes | None:
    """The value of the first header called `name`, or None."""
    for key, value in headers or ():
        if key == name:
            return value
    return None


# ---------------------------------------------------------------- dead letters


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def _text(data: bytes | None) -> str | None:
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def dead_letter_payload(
    *,
    processor: str,
    original_topic: str,
    partition: int,
    offset: int,
    key: bytes | None,
    value: bytes | None,
    headers: Headers | None,
    reason: str,
    error: BaseException | str,
    attempts: int = 1,
    failed_at: datetime | None = None,
) -> dict[str, Any]:
    """A dead-letter record (the `dead_letter` schema in topics.yaml) for one failed input record.

    `original_topic` is the broker-side name the record was read from; `error` is the exception
    (its class is recorded as `module.Class`) or an error type name. Key and value are kept byte
    for byte in base64, and also as text when they are UTF-8. Produce it to
    `dlq_topic(processor).broker_name(settings)` with the original key, as
    `json.dumps(payload).encode()`.
    """
    if isinstance(error, BaseException):
        error_type = f"{type(error).__module__}.{type(error).__qualname__}"
    else:
        error_type = error
    when = (failed_at or datetime.now(UTC)).astimezone(UTC)
    return {
        "schema_version": DEAD_LETTER_SCHEMA_VERSION,
        "processor": processor,
        "original_topic": original_topic,
        "partition": partition,
        "offset": offset,
        "key_base64": _b64(key),
        "key_text": _text(key),
        "value_base64": _b64(value),
        "value_text": _text(value),
        "headers": [{"key": k, "value_base64": _b64(v)} for k, v in headers or ()],
        "reason": reason,
        "error_type": error_type,
        "attempts": attempts,
        "failed_at": when.isoformat().replace("+00:00", "Z"),
    }
