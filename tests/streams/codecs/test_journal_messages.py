"""The `journal.messages` codec: round trips, the schema, what decode rejects."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from core.journal.models import Message, ToolCall
from streams.codecs.errors import InvalidEvent, UnsupportedSchemaVersion
from streams.codecs.journal_messages import MESSAGE_ID_HEADER, decode, encode, payload
from streams.topics import load_topics

REGISTRY = load_topics()


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
    event = encode(message)
    assert event.key == message.thread_id.encode()
    assert event.headers == [(MESSAGE_ID_HEADER, message.message_id.encode())]
    value = json.loads(event.value)
    assert value["schema_version"] == 1
    REGISTRY.validate("journal.messages", value)
    assert value == payload(message)
    assert decode(event.value) == message
    assert decode(event.value.decode()) == message


def test_created_at_keeps_microseconds_and_utc() -> None:
    value = payload(make())
    assert value["created_at"] == "2026-11-02T09:15:00.123456Z"


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
        decode(value)


def test_decode_rejects_invalid_fields() -> None:
    value = payload(make())
    value["offset"] = -1
    with pytest.raises(InvalidEvent, match="offset") as info:
        decode(json.dumps(value).encode())
    assert not isinstance(info.value, UnsupportedSchemaVersion)


def outcome(value: bytes | str) -> Message | tuple[type, str]:
    try:
        return decode(value)
    except InvalidEvent as exc:
        return type(exc), str(exc)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (b'"offset":4', b'"offset":-1'),  # an invalid field
        (b'"offset":4', b'"offset":4.0'),
        (b'"offset":4', b'"offset":NaN'),
        (b'"token_count":5', b'"token_count":5,"schema_version":2'),  # a second version, later
        (b'"token_count":5', b'"token_count":5,"extra":1'),
        (b'"content":"h', b'"content":"\\ud800h'),  # a lone surrogate (json.loads accepts it)
        (b'"content":"h', b'"content":"x","content":"h'),  # a repeated key: the last one counts
        (b'"seq":17', b'"seq":17,'),  # not JSON
        (b'"role":"user"', b'"role":"robot"'),
    ],
)
def test_values_as_encoded_decode_as_the_full_path_does(old: bytes, new: bytes) -> None:
    """Bytes as `encode` writes them take the one-step parse; a str takes the full path
    (`json.loads` + `model_validate`): both accept the same values and raise the same errors."""
    value = encode(make()).value
    assert value.count(old) == 1
    changed = value.replace(old, new)
    assert outcome(changed) == outcome(changed.decode("utf-8"))


def test_a_message_of_shard_0_is_encoded_as_before_shards_and_others_carry_their_shard() -> None:
    """One shard writes exactly the records of releases before shards (their consumers, which
    refuse unknown fields, read them); a message of another shard carries `shard`, and a record
    without it decodes as shard 0."""
    plain = make()
    value = json.loads(encode(plain).value)
    assert "shard" not in value
    assert decode(encode(plain).value).shard == 0
    sharded = make(shard=3)
    value = json.loads(encode(sharded).value)
    assert value["shard"] == 3
    REGISTRY.validate("journal.messages", value)
    assert decode(encode(sharded).value) == sharded
    with pytest.raises(InvalidEvent, match="shard"):
        decode(encode(plain).value.replace(b'"schema_version":1,', b'"schema_version":1,"shard":256,'))
