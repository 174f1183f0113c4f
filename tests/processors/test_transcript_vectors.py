"""transcript-vectors: which messages get a vector and what is stored for them (pure)."""

from __future__ import annotations

import pytest

from core.journal.models import ToolCall
from core.transcripts.fusion import quantize
from processors.transcript_vectors import selected, vector_of
from streams.runtime.processor import InvalidMessage
from tests.processors.transcript_support import message, raw_record, record_of, tool_result


def test_only_user_and_assistant_messages_with_text_are_embedded() -> None:
    batch = [
        record_of(message("th-1", 0, "system prompt", role="system"), 1),
        record_of(message("th-1", 1, "Where did Caroline go?"), 2),
        record_of(
            message("th-1", 2, "", role="assistant", tool_call=ToolCall(id="c", name="f", arguments="{}")), 3
        ),
        record_of(tool_result("th-1", 3, "c", "result"), 4),
        record_of(message("th-1", 4, "   ", role="assistant"), 5),
        record_of(message("th-1", 5, "To the support group.", role="assistant"), 6),
    ]
    assert [(m.offset, m.content) for m in selected(batch)] == [
        (1, "Where did Caroline go?"),
        (5, "To the support group."),
    ]


def test_a_record_that_can_never_be_projected_is_invalid() -> None:
    with pytest.raises(InvalidMessage, match="not JSON"):
        selected([raw_record(b"th-1", b"not json", 3)])
    with pytest.raises(InvalidMessage, match="is not the message's thread_id"):
        selected([raw_record(b"th-2", record_of(message("th-1", 0, "hi"), 1).value, 4)])


def test_the_stored_vector_is_keyed_like_the_message() -> None:
    msg = message("th-1", 7, "hello", seq=12)
    stored = vector_of(msg, "model-a", [0.5, -0.25, 0.0])
    assert (stored.environment, stored.account_id, stored.agent_id, stored.user_id) == (
        msg.environment,
        msg.account_id,
        msg.agent_id,
        msg.user_id,
    )
    assert (stored.thread_id, stored.offset, stored.message_id, stored.model) == (
        "th-1",
        7,
        msg.message_id,
        "model-a",
    )
    assert stored.seq == 12  # a thread deletion's bound
    assert stored.vector == quantize([0.5, -0.25, 0.0]) == bytes([127, 256 - 64, 0])
