"""A message_id taken in another thread is a conflict that tells nothing about that thread's
message (issue 9, finding 14): the answer is the same whatever the caller guessed, so a caller
cannot confirm another user's or agent's text by trying ids."""

from __future__ import annotations

import asyncio

import pytest

from core.errors import Conflict
from core.journal.models import NewMessage, ToolCall
from sinks.slatedb.journal import SlateJournal

from .helpers import thread, user

SECRET = "My card PIN is 4321."


async def conflict_of(journal: SlateJournal, message: NewMessage, thread_id: str = "t2") -> str:
    with pytest.raises(Conflict) as raised:
        await journal.append(thread(thread_id), "agent-2", "mallory", [message])
    return raised.value.message


async def test_the_answer_is_the_same_whatever_the_guess(journal: SlateJournal) -> None:
    await journal.append(thread("t1"), "agent-1", "alice", [user(SECRET, "m1")])
    guesses = [
        user(SECRET, "m1"),  # the exact text
        user("My card PIN is 0000.", "m1"),  # a wrong guess
        NewMessage(message_id="m1", role="assistant", content=SECRET),  # right text, other role
        NewMessage(
            message_id="m1", role="assistant", tool_call=ToolCall(id="c1", name="pin", arguments="{}")
        ),
    ]
    answers = {await conflict_of(journal, guess) for guess in guesses}
    assert len(answers) == 1, answers
    (answer,) = answers
    assert "another thread" in answer and "new message_id" in answer
    for leak in ("content", "role", "tool_call", "t1", "alice", "agent-1", "4321"):
        assert leak not in answer
    assert await journal.last(thread("t2"), 10) == []
    assert await journal.last_seq() == 1


async def test_the_same_within_one_group(journal: SlateJournal) -> None:
    """Ids taken earlier in the same write group (not yet durable) get the same answer."""
    results = await asyncio.gather(
        journal.append(thread("t1"), "agent-1", "alice", [user(SECRET, "m1")]),
        journal.append(thread("t2"), "agent-2", "mallory", [user(SECRET, "m1")]),
        journal.append(thread("t3"), "agent-2", "mallory", [user("a guess", "m1")]),
        return_exceptions=True,
    )
    assert not isinstance(results[0], BaseException)
    errors = [r for r in results[1:] if isinstance(r, Conflict)]
    assert len(errors) == 2
    assert errors[0].message == errors[1].message
    assert "content" not in errors[0].message


async def test_a_retry_in_the_same_thread_keeps_its_useful_error(journal: SlateJournal) -> None:
    first = await journal.append(thread("t1"), "agent-1", "alice", [user("hello", "m1")])
    assert await journal.append(thread("t1"), "agent-1", "alice", [user("hello", "m1")]) == first
    with pytest.raises(Conflict, match=r"m1.*different content"):
        await journal.append(thread("t1"), "agent-1", "alice", [user("hello!", "m1")])
