"""flush's pure parts: the flushed record and the owner of a fact."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from core.chat.base import ExtractedFact, FactsDraft, Usage
from core.errors import InvalidInput
from core.journal.models import Message
from core.memory.models import Provenance
from core.memory.pinned import MemoryScope
from processors.flush import FactRejected, FactWrite, FlushResult, fact_owner, facts_to_store, flushed
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


def draft(*facts: ExtractedFact) -> FactsDraft:
    return FactsDraft(
        facts=facts, usage=Usage(prompt_tokens=0, completion_tokens=0, model="test"), prompt_version="test"
    )


def test_each_fact_is_written_to_its_users_memory_in_order() -> None:
    request = compaction_requested.decode(json.dumps({**REQUEST, "user_id": "u9"}))
    messages = [message(0, "u1"), message(1, None), message(2, "u2")]
    project = ExtractedFact(
        key="project.db", content="Postgres", category="project_fact", importance=0.5, message_ids=("m1",)
    )
    writes = facts_to_store(request, messages, draft(fact("m0"), fact("m0", "m2"), project))
    assert writes[0] == FactWrite(
        scope=MemoryScope(environment="dev", account_id="acme", agent_id="bot", user_id="u1"),
        key="user.name",
        content="Ada",
        category="user_profile",
        visibility="private",
        importance=0.8,
        source=Provenance(thread_id="th-1", message_ids=("m0",)),
    )
    assert isinstance(writes[1], FactRejected) and "several users" in str(writes[1].error)
    assert isinstance(writes[2], FactWrite) and writes[2].scope.user_id == "u9"  # the request's user


def test_without_any_user_a_fact_is_shared() -> None:
    request = compaction_requested.decode(json.dumps(REQUEST))  # user_id null
    (write,) = facts_to_store(request, [message(0, None)], draft(fact("m0")))
    assert isinstance(write, FactWrite)
    assert (write.scope.user_id, write.visibility) == (None, "shared")
    assert facts_to_store(request, [message(0, None)], draft()) == []
