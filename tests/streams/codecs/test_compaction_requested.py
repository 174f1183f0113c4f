"""The `compaction.requested` codec: the examples of topics.yaml, round trips, what decode rejects."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given

from streams.codecs.compaction_requested import CompactionRequest, decode, encode, encode_recorded, timestamp
from streams.codecs.errors import InvalidEvent
from streams.topics import default_registry
from tests.streams.codecs.strategies import requests

TOPIC = "compaction.requested"
EXAMPLES = default_registry().get(TOPIC).examples
REQUEST: dict[str, Any] = dict(EXAMPLES[0])


@pytest.mark.parametrize("example", EXAMPLES)
def test_every_example_decodes_and_encodes_back(example: dict[str, Any]) -> None:
    request = decode(json.dumps(example).encode())
    assert request.payload() == example
    assert json.loads(encode(request).value) == example


@given(requests())
def test_decode_of_encode_is_the_identity(value: dict[str, Any]) -> None:
    request = decode(json.dumps(value))
    event = encode(request)
    assert event.key == value["thread_id"].encode()
    assert json.loads(event.value) == value  # unknown fields too
    assert decode(event.value) == request


def test_a_value_the_schema_accepts_decodes() -> None:
    for value in (
        REQUEST,
        {**REQUEST, "user_id": None},
        {**REQUEST, "requested_at": "2026-11-02T09:40:00+01:00"},
    ):
        default_registry().validate(TOPIC, value)
        decode(json.dumps(value).encode())


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (None, "value is missing"),
        (b"{not json", "value is not JSON"),
        (b"\xff", "value is not JSON"),
        (b"[1]", "value is invalid"),
        (json.dumps({**REQUEST, "tokens": -1}).encode(), "value is invalid: tokens"),
        (json.dumps({**REQUEST, "messages": 0}).encode(), "value is invalid: messages"),
        (json.dumps({**REQUEST, "schema_version": 2}).encode(), "schema_version"),
        (json.dumps({**REQUEST, "reason": "size"}).encode(), "reason"),
        (json.dumps({**REQUEST, "account_id": "no/slash"}).encode(), "account_id"),
        (json.dumps({**REQUEST, "environment": "Dev"}).encode(), "environment"),
        (json.dumps({**REQUEST, "requested_at": "yesterday"}).encode(), "requested_at"),
        (json.dumps({k: v for k, v in REQUEST.items() if k != "thread_id"}).encode(), "thread_id"),
        (json.dumps({**REQUEST, "from_offset": 50}).encode(), "from_offset 50 is after to_offset 49"),
    ],
)
def test_what_the_schema_rejects_is_invalid(value: bytes | None, reason: str) -> None:
    with pytest.raises(InvalidEvent, match=reason):
        decode(value)


def test_the_scope_and_the_thread() -> None:
    request = CompactionRequest.model_validate(REQUEST)
    assert (request.thread.account_id, request.thread.thread_id) == ("acme", "th-7f3a")
    assert request.scope.agent_id == "support-bot"


def test_a_recorded_value_is_produced_again_as_it_is() -> None:
    event = encode_recorded("th-1", {"anything": 1})
    assert (event.key, json.loads(event.value)) == (b"th-1", {"anything": 1})


def test_timestamps_are_utc_with_z() -> None:
    when = datetime(2026, 11, 2, 10, 0, 0, 500000, tzinfo=timezone(timedelta(hours=1)))
    assert timestamp(when) == "2026-11-02T09:00:00.500000Z"
    assert timestamp(datetime(2026, 11, 2, 9, 0, tzinfo=UTC)) == "2026-11-02T09:00:00Z"
