"""Append listeners: called after each durable group commit (the node wakes its relay with them)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from core.errors import JournalUnavailable
from core.journal.models import Message
from sinks.slatedb.journal import SlateJournal

from .helpers import thread, user


async def test_a_listener_is_called_once_per_group_after_its_messages_are_durable(
    journal: SlateJournal,
) -> None:
    woken = asyncio.Event()
    calls: list[int] = []

    def listener() -> None:
        calls.append(1)
        woken.set()

    journal.add_append_listener(listener)

    async def relay_like() -> list[Message]:  # wakes on the listener and reads durable messages only
        await woken.wait()
        return await journal.read_from_seq(0, 100)

    reader = asyncio.create_task(relay_like())
    stored = await asyncio.gather(*(journal.append(thread(), "a", None, [user(str(i))]) for i in range(5)))
    seen = await reader
    in_seq_order = sorted((m for batch in stored for m in batch), key=lambda m: m.seq)
    assert seen and seen == in_seq_order[: len(seen)]  # the first group at least, already durable
    assert 1 <= len(calls) == journal.stats.batches <= 5  # one call per group, not per append


async def test_a_failed_group_does_not_call_the_listeners(journal: SlateJournal) -> None:
    calls: list[int] = []
    journal.add_append_listener(lambda: calls.append(1))
    await journal.append(thread(), "a", None, [user("first")])
    assert calls == [1]
    journal._commits.write_timeout_s = 0  # the next group's durability wait times out at once
    with pytest.raises(JournalUnavailable, match="did not complete"):
        await journal.append(thread(), "a", None, [user("lost?", "m1")])
    assert calls == [1]


async def test_a_raising_listener_is_logged_and_neither_the_append_nor_other_listeners_fail(
    journal: SlateJournal, caplog: pytest.LogCaptureFixture
) -> None:
    def broken() -> None:
        raise RuntimeError("listener bug")

    calls: list[int] = []
    journal.add_append_listener(broken)
    journal.add_append_listener(lambda: calls.append(1))
    with caplog.at_level(logging.ERROR, logger="memstream.journal"):
        stored = await journal.append(thread(), "a", None, [user("hello")])
    assert [m.seq for m in stored] == [1]
    assert calls == [1]
    assert "append listener" in caplog.text and "listener bug" in caplog.text
