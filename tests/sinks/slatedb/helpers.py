"""Small builders shared by the journal tests."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import pytest

from core.errors import JournalFenced
from core.journal.models import NewMessage, ThreadRef, ToolCall
from core.sharding.journal import ShardedJournal
from core.stores.journal import Journal
from sinks.slatedb.journal import SlateJournal


def thread(thread_id: str = "t1", account_id: str = "acc1", environment: str = "test") -> ThreadRef:
    return ThreadRef(environment=environment, account_id=account_id, thread_id=thread_id)


def user(content: str, message_id: str | None = None) -> NewMessage:
    return NewMessage(role="user", content=content, message_id=message_id)


def tool_call_pair(call_id: str = "call-1") -> list[NewMessage]:
    """An assistant tool call and its tool result."""
    return [
        NewMessage(
            role="assistant",
            content="",
            reasoning="need the weather",
            tool_call=ToolCall(id=call_id, name="weather", arguments='{"city": "Paris"}'),
        ),
        NewMessage(role="tool", tool_call=ToolCall(id=call_id, result="18 C and sunny")),
    ]


async def every_call_is_fenced(journal: Journal) -> None:
    """Every call of `journal` raises JournalFenced."""
    calls = [
        journal.append(thread(), "a", None, [user("late")]),
        journal.last(thread(), 5),
        journal.after(thread(), -1),
        journal.read_from_seq(0, 10),
        journal.last_seq(),
        journal.get_cursor("relay"),
        journal.set_cursor("relay", 1),
    ]
    for call in calls:
        with pytest.raises(JournalFenced, match="opened by another writer; this writer is fenced"):
            await call


async def eventually(check: Callable[[], Awaitable[bool]], timeout_s: float = 10.0) -> None:
    """Wait until `check()` holds (e.g. a journal reader saw a write), polling every 10 ms."""
    deadline = time.monotonic() + timeout_s
    while not await check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def open_shards(
    directory: str, shards: int, *, missing: frozenset[int] = frozenset()
) -> ShardedJournal[SlateJournal]:
    """The journals of `shards` shards at `file://{directory}/journal-shard-K`, every one open
    except those in `missing` (another node's); close it with `close()`."""
    opened = {
        k: await SlateJournal.open(
            f"file://{directory}/journal-shard-{k}", flush_interval_ms=1, shard=k, shards=shards
        )
        for k in range(shards)
        if k not in missing
    }
    return ShardedJournal(shards, opened)
