"""Rows written before ids were matched in full (an id could end in a line feed) stay readable:
the relay, republish and rebuilds read every seq, and a row that no longer parsed would stop
them there. New input with such ids is refused."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError
from slatedb.uniffi import WriteBatch

from core.journal.models import Message, NewMessage, ToolCall
from sinks.slatedb import keys
from sinks.slatedb.journal import SlateJournal

from .helpers import thread, user


def legacy_message(seq: int) -> Message:
    return Message(
        message_id="m9\n",
        environment="test",
        account_id="acc1",
        agent_id="bot\n",
        user_id="u1\n",
        thread_id="t9\n",
        offset=0,
        seq=seq,
        role="assistant",
        content="",
        tool_call=ToolCall(id="c1\n", name="f", arguments="{}"),
        created_at=datetime.now(UTC),
        token_count=1,
    )


async def test_legacy_rows_are_read_back(journal_url: str) -> None:
    journal = await SlateJournal.open(journal_url)
    await journal.append(thread(), "a", None, [user("before")])
    row_key = b"m/test/acc1/t9\n/" + keys.offset_suffix(0)  # as the old code built it
    batch = WriteBatch()
    batch.put(row_key, legacy_message(2).model_dump_json().encode())
    batch.put(keys.seq_key(2), row_key)
    await (await journal._db.write(batch)).await_durable()
    await journal.close()

    journal = await SlateJournal.open(journal_url)
    try:
        await journal.append(thread(), "a", None, [user("after")])
        read = await journal.read_from_seq(0, 10)
        assert [(m.seq, m.thread_id) for m in read] == [(1, "t1"), (2, "t9\n"), (3, "t1")]
        assert read[1].tool_call is not None and read[1].tool_call.id == "c1\n"
    finally:
        await journal.close()


@pytest.mark.parametrize("stored", ["t9\n\n", "t9\r", "t9\r\n", "\nt9", "t 9"])
def test_only_the_old_rules_are_tolerated_on_read(stored: str) -> None:
    with pytest.raises(ValidationError):
        Message.model_validate({**legacy_message(1).model_dump(), "thread_id": stored})


def test_new_input_with_such_ids_is_refused() -> None:
    with pytest.raises(ValidationError, match=r"tool_call\.id"):
        NewMessage(role="assistant", tool_call=ToolCall(id="c1\n", name="f", arguments="{}"))
    with pytest.raises(ValidationError, match="U\\+000A"):
        NewMessage(role="user", content="x", message_id="m9\n")
