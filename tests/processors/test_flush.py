"""flush's pure parts: decoding requests and the owner of a fact."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from core.chat.base import ExtractedFact
from core.errors import InvalidInput
from core.journal.models import Message
from processors.flush import SOURCE_TOPIC, FlushResult, decode, fact_owner, flushed_payload
from streams.runtime.processor import InvalidMessage, Record
from streams.topics import default_registry

REQUEST = {
    "schema_version": 1,
    "environment": "dev",
    "account_id": "acme",
    "agent_id": "bot",
    "user_id": None,
    "thread_id": "th-1",
    "from_offset": 3,
    "to_offset": 9,
    "tokens": 100,
    "messages": 7,
    "reason": "messages",
    "requested_at": "2026-11-29T12:00:00Z",
}


def record(value: bytes | None) -> Record:
    return Record(SOURCE_TOPIC, 0, 5, b"th-1", value, (), None)


def message(i: int, user: str | None) -> Message:
    return Message(
        message_id=f"m{i}",
        environment="dev",
        account_id="acme",
        agent_id="bot",
        user_id=user,
        thread_id="th-1",
        offset=i,
        seq=i + 1,
        role="user",
        content="x",
        created_at=datetime.now(UTC),
        token_count=1,
    )


def fact(*ids: str) -> ExtractedFact:
    return ExtractedFact(
        key="user.name", content="Ada", category="user_profile", importance=0.8, message_ids=ids
    )


def test_a_request_round_trips_into_a_valid_flushed_record() -> None:
    request = decode(record(json.dumps(REQUEST).encode()))
    assert (request.thread.thread_id, request.from_offset, request.to_offset) == ("th-1", 3, 9)
    out = flushed_payload(request, FlushResult("failed", 1, 2, "ModelUnavailable: down"))
    default_registry().validate("compaction.flushed", out)
    assert out["flush"] == {
        "status": "failed",
        "facts_stored": 1,
        "facts_rejected": 2,
        "error": "ModelUnavailable: down",
    }


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (None, "value is missing"),
        (b"{not json", "value is not JSON"),
        (json.dumps({**REQUEST, "tokens": -1}).encode(), "value is invalid"),
        (json.dumps({**REQUEST, "from_offset": 10}).encode(), "from_offset 10 is after to_offset 9"),
    ],
)
def test_bad_requests_are_invalid_messages(value: bytes | None, reason: str) -> None:
    with pytest.raises(InvalidMessage, match=reason):
        decode(record(value))


def test_a_fact_belongs_to_the_user_of_its_messages() -> None:
    messages = [message(0, "u1"), message(1, None), message(2, "u2")]
    assert fact_owner(fact("m0"), messages, None) == "u1"
    assert fact_owner(fact("m0", "m1"), messages, "u9") == "u1"
    assert fact_owner(fact("m1"), messages, "u9") == "u9"
    assert fact_owner(fact("m1"), messages, None) is None
    with pytest.raises(InvalidInput, match="several users"):
        fact_owner(fact("m0", "m2"), messages, "u1")
