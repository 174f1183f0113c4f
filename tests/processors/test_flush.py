"""flush's pure parts: the flushed record and the owner of a fact."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from core.chat.base import ExtractedFact
from core.errors import InvalidInput
from core.journal.models import Message
from processors.flush import FlushResult, fact_owner, flushed
from streams.codecs import compaction_requested
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


def test_the_flushed_record_is_the_request_plus_the_flush() -> None:
    request = compaction_requested.decode(json.dumps({**REQUEST, "trace": "t-1"}).encode())
    out = flushed(request, FlushResult("failed", 1, 2, "ModelUnavailable: down")).payload()
    assert out == {**REQUEST, "trace": "t-1", "flush": out["flush"]}  # unknown fields are echoed
    del out["trace"]
    default_registry().validate("compaction.flushed", out)
    assert out["flush"] == {
        "status": "failed",
        "facts_stored": 1,
        "facts_rejected": 2,
        "error": "ModelUnavailable: down",
    }
    stored = flushed(request, FlushResult("stored", 3)).payload()
    assert stored["flush"] == {"status": "stored", "facts_stored": 3, "facts_rejected": 0}


def test_a_fact_belongs_to_the_user_of_its_messages() -> None:
    messages = [message(0, "u1"), message(1, None), message(2, "u2")]
    assert fact_owner(fact("m0"), messages, None) == "u1"
    assert fact_owner(fact("m0", "m1"), messages, "u9") == "u1"
    assert fact_owner(fact("m1"), messages, "u9") == "u9"
    assert fact_owner(fact("m1"), messages, None) is None
    with pytest.raises(InvalidInput, match="several users"):
        fact_owner(fact("m0", "m2"), messages, "u1")
