"""The summarizer's pure decisions: what a request takes over the current summary, the next
summary, and which failures are final or retried."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from core.chat.base import ModelRequestRejected, ModelUnavailable, ModelUnsupported
from core.errors import JournalUnavailable, ThreadDeleted
from core.summaries.models import Summary, SummaryUnavailable, SummaryWriteFailed
from processors.summarizer import (
    Covered,
    MessageRange,
    RequestNotSatisfiable,
    covered,
    is_final,
    is_retried,
    next_summary,
    step,
)
from streams.codecs.compaction_flushed import CompactionFlushed
from tests.processors.transcript_support import message

T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
REQUEST = CompactionFlushed(
    environment="test", account_id="acme", agent_id="bot", thread_id="th-1", from_offset=10, to_offset=49
)


def summary(last: int, version: int = 1, messages: int = 10) -> Summary:
    return Summary(
        version=version,
        timestamp=T0,
        last_message_offset=last,
        last_message_id=f"m{last}",
        content="so far",
        token_count=3,
        message_count=messages,
    )


def test_without_a_summary_the_thread_is_read_from_its_start() -> None:
    assert step(REQUEST, None) == MessageRange(after=-1, up_to=49)


def test_after_the_current_summary_up_to_the_request() -> None:
    assert step(REQUEST, summary(9)) == MessageRange(after=9, up_to=49)
    assert step(REQUEST, summary(48)) == MessageRange(after=48, up_to=49)


def test_a_summary_reaching_the_request_covers_it() -> None:
    for last in (49, 80):
        current = summary(last)
        assert step(REQUEST, current) == Covered(current)
        assert covered(REQUEST, current)
    assert not covered(REQUEST, None)


def test_the_next_summary_folds_the_messages_into_the_current_one() -> None:
    folded = [message("th-1", i, "hi") for i in (10, 11, 49)]
    first = next_summary(None, folded, "new", 7, T0)
    assert (first.version, first.last_message_offset, first.last_message_id) == (1, 49, "th-1-49")
    assert (first.message_count, first.content, first.token_count) == (3, "new", 7)
    after = next_summary(summary(9, version=4, messages=10), folded, "new", 7, T0)
    assert (after.version, after.message_count) == (5, 13)


@pytest.mark.parametrize(
    "error",
    [
        ModelRequestRejected("bad key", status=401),
        ModelUnsupported("no json"),
        RequestNotSatisfiable("beyond the journal"),
        ThreadDeleted("the thread was deleted"),
    ],
)
def test_what_retrying_cannot_fix_is_final(error: Exception) -> None:
    assert is_final(error) and not is_retried(error)


@pytest.mark.parametrize(
    "error",
    [
        ModelUnavailable("down"),
        SummaryWriteFailed("conflicts"),
        SummaryUnavailable("gone"),
        JournalUnavailable("closed"),
    ],
)
def test_model_and_storage_failures_are_retried(error: Exception) -> None:
    assert is_retried(error) and not is_final(error)


def test_other_errors_are_neither_final_nor_retried() -> None:
    assert not is_final(RuntimeError("redis")) and not is_retried(RuntimeError("redis"))
