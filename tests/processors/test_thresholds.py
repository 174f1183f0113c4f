"""The pure part of the thresholds processor: counters, crossing, folding the journal, payloads."""

from __future__ import annotations

from datetime import UTC, datetime

from core.journal.models import Message
from core.stores.thresholds import Outcome, ThreadScope
from processors.thresholds import (
    MESSAGE_LIMIT,
    OUTPUT_TOPIC,
    TOKEN_LIMIT,
    Counters,
    advance,
    compaction_request,
    crossing,
    fold,
    plan,
)
from streams.topics import default_registry

T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)


def message(offset: int, tokens: int, *, agent: str = "bot") -> Message:
    return Message(
        message_id=f"m{offset}",
        environment="test",
        account_id="acme",
        agent_id=agent,
        user_id="u1",
        thread_id="th-1",
        offset=offset,
        seq=offset + 1,
        role="user",
        content="hello",
        created_at=T0,
        token_count=tokens,
    )


def test_the_limits_are_the_documented_ones() -> None:
    assert (TOKEN_LIMIT, MESSAGE_LIMIT) == (2_000, 50)


def test_advance_counts_and_reports_the_threshold_reached() -> None:
    assert advance(Counters(), 10) == (Counters(tokens=10, messages=1), None)
    assert advance(Counters(tokens=1_990, messages=3), 10) == (Counters(2_000, 4), "tokens")
    assert advance(Counters(tokens=10, messages=49), 1) == (Counters(11, 50), "messages")
    assert advance(Counters(tokens=1_999, messages=49), 1)[1] == "tokens"  # both: tokens first
    assert advance(Counters(tokens=5, messages=2), 1, token_limit=100, message_limit=3)[1] == "messages"
    assert crossing(Counters(1_999, 49)) is None


def test_fold_sums_the_agents_messages_up_to_the_current_offset() -> None:
    journal = [message(0, 5), message(1, 7, agent="other"), message(2, 11), message(3, 13)]
    assert fold(journal, "bot", 2) == Counters(tokens=16, messages=2)
    assert fold([], "bot", 2) == Counters()


def test_requests_match_the_declared_schema() -> None:
    outcome = Outcome("request", base=10, tokens=2_010, messages=12, offset=21, reason="tokens")
    payload = compaction_request(message(21, 400), outcome, T0).payload()
    default_registry().validate(OUTPUT_TOPIC, payload)
    assert payload == {
        "schema_version": 1,
        "environment": "test",
        "account_id": "acme",
        "agent_id": "bot",
        "user_id": "u1",
        "thread_id": "th-1",
        "from_offset": 10,
        "to_offset": 21,
        "tokens": 2_010,
        "messages": 12,
        "reason": "tokens",
        "requested_at": "2026-11-02T09:00:00Z",
    }


def test_plan_requests_what_emits_and_keeps_the_highest_held_back_crossing() -> None:
    request = Outcome("request", base=0, tokens=2_001, messages=3, offset=2, reason="tokens")
    guarded = Outcome("guarded", offset=5)
    counted = [
        (message(1, 5), Outcome("counted", offset=1)),
        (message(2, 2_000), request),
        (message(5, 1), guarded),
        (message(4, 1), Outcome("guarded", offset=4)),
        (message(3, 1, agent="other"), Outcome("guarded", offset=3)),
    ]
    decided = plan(counted, T0)
    assert [(r.to_offset, r.reason, r.requested_at) for r in decided.requests] == [
        (2, "tokens", "2026-11-02T09:00:00Z")
    ]
    assert decided.held_back == {
        ThreadScope("test", "acme", "bot", "th-1"): 5,
        ThreadScope("test", "acme", "other", "th-1"): 3,
    }


def test_plan_of_nothing_that_crossed_is_empty() -> None:
    decided = plan([(message(0, 1), Outcome("counted", offset=0)), (message(1, 1), Outcome("exists"))], T0)
    assert (decided.requests, decided.held_back) == ([], {})
    assert plan([], T0).requests == []
