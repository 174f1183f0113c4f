"""Wire format of journal messages and dead-letter records."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime

import pytest

from core.journal.models import Message, ToolCall
from streams.events import (
    MESSAGE_ID_HEADER,
    InvalidEvent,
    UnsupportedSchemaVersion,
    dead_letter_payload,
    decode_message,
    encode_message,
    header,
    message_payload,
)
from streams.topics import load_topics

REGISTRY = load_topics().with_dead_letter("summarizer")


def make(role: str = "user", **kw: object) -> Message:
    fields: dict[str, object] = {
        "message_id": "m-1",
        "environment": "dev",
        "account_id": "acme",
        "agent_id": "bot",
        "user_id": "u1",
        "thread_id": "th:1",
        "offset": 4,
        "seq": 17,
        "role": role,
        "content": 'héllo \u2028 "quoted" \n',
        "created_at": datetime(2026, 11, 2, 9, 15, 0, 123456, tzinfo=UTC),
        "token_count": 5,
    }
    fields.update(kw)
    return Message.model_validate(fields)


MESSAGES = [
    make(),
    make(
        "assistant",
        content="",
        reasoning="think",
        tool_call=ToolCall(id="c1", name="f", arguments='{"a": 1}'),
    ),
    make("tool", content="", user_id=None, tool_call=ToolCall(id="c1", result="ok")),
    make("system", content="be brief"),
]


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: m.role)
def test_encode_round_trips_and_matches_the_schema(message: Message) -> None:
    event = encode_message(message)
    assert event.key == message.thread_id.encode()
    assert event.headers == [(MESSAGE_ID_HEADER, message.message_id.encode())]
    payload = json.loads(event.value)
    assert payload["schema_version"] == 1
    REGISTRY.validate("journal.messages", payload)
    assert payload == message_payload(message)
    assert decode_message(event.value) == message
    assert decode_message(event.value.decode()) == message


def test_created_at_keeps_microseconds_and_utc() -> None:
    payload = message_payload(make())
    assert payload["created_at"] == "2026-11-02T09:15:00.123456Z"


@pytest.mark.parametrize(
    ("value", "error", "text"),
    [
        (None, InvalidEvent, "no value"),
        (b"not json", InvalidEvent, "not JSON"),
        (b"\xff\xfe", InvalidEvent, "not JSON"),
        (b"[1, 2]", InvalidEvent, "JSON object"),
        (b'{"message_id": "m"}', UnsupportedSchemaVersion, "None"),
        (b'{"schema_version": 2}', UnsupportedSchemaVersion, "2"),
    ],
)
def test_decode_rejects_what_is_not_a_version_1_message(value: bytes | None, error: type, text: str) -> None:
    with pytest.raises(error, match=text):
        decode_message(value)


def test_decode_rejects_invalid_fields() -> None:
    payload = message_payload(make())
    payload["offset"] = -1
    with pytest.raises(InvalidEvent, match="offset") as info:
        decode_message(json.dumps(payload).encode())
    assert not isinstance(info.value, UnsupportedSchemaVersion)


def test_header_lookup() -> None:
    headers = [("a", b"1"), (MESSAGE_ID_HEADER, b"m"), ("a", b"2")]
    assert header(headers, "a") == b"1"
    assert header(headers, MESSAGE_ID_HEADER) == b"m"
    assert header(headers, "missing") is None
    assert header(None, "a") is None


def test_dead_letter_payload_keeps_bytes_and_matches_the_schema() -> None:
    value = b"\xff\x00not utf-8"
    payload = dead_letter_payload(
        processor="summarizer",
        original_topic="t.journal.messages",
        partition=2,
        offset=99,
        key=b"th:1",
        value=value,
        headers=[(MESSAGE_ID_HEADER, b"m-1"), ("empty", None)],
        reason="value is not JSON",
        error=InvalidEvent("journal.messages value is not JSON"),
        attempts=3,
        failed_at=datetime(2026, 11, 2, 10, 0, tzinfo=UTC),
    )
    REGISTRY.validate("dlq.summarizer", payload)
    assert base64.b64decode(payload["value_base64"]) == value
    assert payload["value_text"] is None
    assert payload["key_text"] == "th:1"
    assert payload["error_type"] == "streams.events.InvalidEvent"
    assert payload["failed_at"] == "2026-11-02T10:00:00Z"
    assert payload["headers"][1] == {"key": "empty", "value_base64": None}


def test_dead_letter_payload_of_a_tombstone_with_an_error_name() -> None:
    payload = dead_letter_payload(
        processor="summarizer",
        original_topic="journal.messages",
        partition=0,
        offset=0,
        key=None,
        value=None,
        headers=None,
        reason="tombstone",
        error="Tombstone",
    )
    REGISTRY.validate("dlq.summarizer", payload)
    assert payload["key_base64"] is None and payload["value_text"] is None and payload["headers"] == []
    assert payload["failed_at"].endswith("Z")
