"""journal_tool_call_view over the in-memory fake store: lookup rules and UTF-8 byte paging."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import pytest

from core.errors import InvalidInput
from core.stores.transcripts import TranscriptScope
from core.transcripts.caller import JournalContext
from core.transcripts.tool_call_view import (
    MAX_PAGE_BYTES,
    AmbiguousToolCall,
    ToolCallChanged,
    ToolCallNotFound,
    ToolCallPartNotFound,
    ToolCallViewer,
    character_start,
    complete_prefix,
)
from tests.fakes.transcripts import InMemoryTranscriptStore
from tests.sinks.clickhouse.rows import row

SCOPE = TranscriptScope(environment="test", account_id="acct", agent_id="agent")
CONTEXT = JournalContext(scope=SCOPE)


def call_rows(thread: str, call_id: str, arguments: str, result: str | None, *, at: int = 0) -> list[Any]:
    rows = [
        row(
            thread,
            at,
            "",
            role="assistant",
            tool_call_id=call_id,
            tool_name="fetch",
            tool_arguments=arguments,
        )
    ]
    if result is not None:
        rows.append(row(thread, at + 1, "", role="tool", tool_call_id=call_id, tool_result=result))
    return rows


def test_complete_prefix() -> None:
    text = "aé€😀".encode()  # 1 + 2 + 3 + 4 bytes
    assert [complete_prefix(text[:n]) for n in range(len(text) + 1)] == [0, 1, 1, 3, 3, 3, 6, 6, 6, 6, 10]
    assert complete_prefix(b"") == 0


def test_character_start() -> None:
    text = "a😀".encode()
    assert character_start(text[:2], 2) == 1
    assert character_start(text[1:4], 4) == 1
    assert character_start(b"\xe2\x82", 2) == 0  # € cut after two bytes: it starts at 0


async def page_through(
    viewer: ToolCallViewer, call_id: str, length: int, part: str = "result"
) -> tuple[str, list[int]]:
    text, offsets, offset = "", [], 0
    while True:
        page = await viewer.invoke(
            {"tool_call_id": call_id, "part": part, "offset": offset, "length": length}, CONTEXT
        )
        assert page["length"] == len(page["content"].encode()) <= length
        assert page["offset"] == offset
        text += page["content"]
        offsets.append(offset)
        if page["next_offset"] is None:
            assert offset + page["length"] == page["total_bytes"]
            return text, offsets
        assert page["next_offset"] == offset + page["length"]
        offset = page["next_offset"]


@pytest.mark.parametrize("unit", ["x", "é", "€", "😀", "aé€😀\n"])
async def test_paging_reassembles_exactly(unit: str) -> None:
    result = (unit * (200_000 // len(unit.encode()) + 1))[:70_000]
    store = InMemoryTranscriptStore(rows=call_rows("t1", "call_1", '{"q": 1}', result))
    viewer = ToolCallViewer(store)
    text, offsets = await page_through(viewer, "call_1", MAX_PAGE_BYTES)
    assert text == result
    text, offsets = await page_through(viewer, "call_1", 1000)
    assert text == result and len(offsets) >= len(result.encode()) // 1000


async def test_page_end_moves_back_to_a_character_boundary() -> None:
    store = InMemoryTranscriptStore(rows=call_rows("t1", "c", "{}", "ab😀cd"))  # 😀 at bytes 2..5
    viewer = ToolCallViewer(store)
    page = await viewer.invoke({"tool_call_id": "c", "length": 4}, CONTEXT)
    assert (page["content"], page["length"], page["next_offset"], page["total_bytes"]) == ("ab", 2, 2, 8)
    page = await viewer.invoke({"tool_call_id": "c", "offset": 2, "length": 4}, CONTEXT)
    assert (page["content"], page["length"], page["next_offset"]) == ("😀", 4, 6)
    page = await viewer.invoke({"tool_call_id": "c", "offset": 6}, CONTEXT)
    assert (page["content"], page["length"], page["next_offset"]) == ("cd", 2, None)
    end = await viewer.invoke({"tool_call_id": "c", "offset": 8}, CONTEXT)
    assert (end["content"], end["length"], end["next_offset"]) == ("", 0, None)


async def test_offset_inside_a_character_and_length_too_small() -> None:
    viewer = ToolCallViewer(InMemoryTranscriptStore(rows=call_rows("t1", "c", "{}", "ab😀cd")))
    inside = re.escape("3 falls inside a UTF-8 character (it starts at byte 2)")
    with pytest.raises(InvalidInput, match=inside) as info:
        await viewer.invoke({"tool_call_id": "c", "offset": 3}, CONTEXT)
    assert info.value.field == "arguments.offset"
    with pytest.raises(InvalidInput, match="3 bytes cannot hold the 4-byte character at offset 2") as info:
        await viewer.invoke({"tool_call_id": "c", "offset": 2, "length": 3}, CONTEXT)
    assert info.value.field == "arguments.length"
    with pytest.raises(InvalidInput, match=re.escape("9 is past the end of the result (8 bytes)")) as info:
        await viewer.invoke({"tool_call_id": "c", "offset": 9}, CONTEXT)
    assert info.value.field == "arguments.offset"


async def test_arguments_part_and_missing_result() -> None:
    store = InMemoryTranscriptStore(rows=call_rows("t1", "pending", '{"city": "Zürich"}', None))
    viewer = ToolCallViewer(store)
    page = await viewer.invoke({"tool_call_id": "pending", "part": "arguments"}, CONTEXT)
    assert (
        page["content"] == '{"city": "Zürich"}' and page["total_bytes"] == 19 and page["tool_name"] == "fetch"
    )
    with pytest.raises(ToolCallPartNotFound, match="has no result recorded"):
        await viewer.invoke({"tool_call_id": "pending"}, CONTEXT)


async def test_unknown_id_is_not_found() -> None:
    viewer = ToolCallViewer(InMemoryTranscriptStore(rows=call_rows("t1", "c", "{}", "ok")))
    with pytest.raises(ToolCallNotFound, match="no tool call 'nope' in the threads of agent 'agent'") as info:
        await viewer.invoke({"tool_call_id": "nope"}, CONTEXT)
    assert info.value.code == "tool_call_not_found"
    with pytest.raises(ToolCallNotFound, match="in thread 't2'"):
        await viewer.invoke({"tool_call_id": "c", "thread_id": "t2"}, CONTEXT)


async def test_same_id_in_several_threads() -> None:
    rows = [r for n in range(12) for r in call_rows(f"t{n:02d}", "dup", "{}", f"result {n}", at=n)]
    viewer = ToolCallViewer(InMemoryTranscriptStore(rows=rows))
    with pytest.raises(
        AmbiguousToolCall, match=r"occurs in 12 threads \(.* and 2 more\).*pass `thread_id`"
    ) as info:
        await viewer.invoke({"tool_call_id": "dup"}, CONTEXT)
    assert info.value.code == "ambiguous_tool_call"
    listed = ", ".join(f"t{n:02d}" for n in range(11, 1, -1))  # most recent first, 10 of them
    assert f"({listed} and 2 more)" in info.value.message
    here = JournalContext(scope=SCOPE, thread_id="t03")
    assert (await viewer.invoke({"tool_call_id": "dup"}, here))["content"] == "result 3"
    chosen = await viewer.invoke({"tool_call_id": "dup", "thread_id": "t07"}, here)
    assert (chosen["thread_id"], chosen["content"]) == ("t07", "result 7")


def repeated_id_rows() -> list[Any]:
    """Thread t1 reuses `call_0` for three calls (as servers that number calls per turn do)."""
    return (
        call_rows("t1", "call_0", '{"n": 1}', "short", at=0)
        + call_rows("t1", "call_0", '{"n": 2}', "a much longer second result with the same id", at=2)
        + call_rows("t1", "call_0", '{"n": 3}', None, at=4)
    )


async def test_a_repeated_id_reads_the_most_recent_call_unless_told_which() -> None:
    viewer = ToolCallViewer(InMemoryTranscriptStore(rows=repeated_id_rows()))
    latest = await viewer.invoke({"tool_call_id": "call_0", "part": "arguments"}, CONTEXT)
    assert (latest["content"], latest["occurrence"], latest["occurrences"]) == ('{"n": 3}', 3, 3)
    with pytest.raises(ToolCallPartNotFound, match="has no result recorded"):
        await viewer.invoke({"tool_call_id": "call_0"}, CONTEXT)  # the latest call has no result yet
    second = "a much longer second result with the same id"
    text, offsets = "", 0
    while True:  # paging stays on one call: size and bytes of the same message
        page = await viewer.invoke(
            {"tool_call_id": "call_0", "occurrence": 2, "offset": offsets, "length": 7}, CONTEXT
        )
        assert (page["occurrence"], page["total_bytes"]) == (2, len(second))
        text += page["content"]
        if page["next_offset"] is None:
            break
        offsets = page["next_offset"]
    assert text == second
    first = await viewer.invoke({"tool_call_id": "call_0", "occurrence": 1, "thread_id": None}, CONTEXT)
    assert (first["content"], first["total_bytes"], first["occurrences"]) == ("short", 5, 3)
    with pytest.raises(
        ToolCallNotFound, match=r"has 3 tool call\(s\) with id 'call_0': occurrence must be 1..3"
    ):
        await viewer.invoke({"tool_call_id": "call_0", "occurrence": 4}, CONTEXT)


async def test_a_repeated_id_in_the_current_thread_wins_over_other_threads() -> None:
    rows = repeated_id_rows() + call_rows("t2", "call_0", "{}", "elsewhere", at=0)
    store = InMemoryTranscriptStore(rows=rows)
    viewer = ToolCallViewer(store)
    with pytest.raises(AmbiguousToolCall, match="occurs in 2 threads"):
        await viewer.invoke({"tool_call_id": "call_0"}, CONTEXT)
    there = await viewer.invoke({"tool_call_id": "call_0"}, JournalContext(scope=SCOPE, thread_id="t2"))
    assert (there["thread_id"], there["content"], there["occurrences"]) == ("t2", "elsewhere", 1)
    here = await viewer.invoke(
        {"tool_call_id": "call_0", "occurrence": 2}, JournalContext(scope=SCOPE, thread_id="t1")
    )
    assert (here["thread_id"], here["occurrence"], here["occurrences"]) == ("t1", 2, 3)


class ShrinkingStore(InMemoryTranscriptStore):
    """The projection is rebuilt between the lookup and the read: the result is shorter now."""

    async def tool_call(
        self, scope: TranscriptScope, tool_call_id: str, *, thread_id: str | None = None
    ) -> list[Any]:
        calls = await super().tool_call(scope, tool_call_id, thread_id=thread_id)
        self.rows = [replace(r, tool_result="tiny") if r.role == "tool" else r for r in self.rows]
        return calls


@pytest.mark.parametrize("offset", [0, 6, 40])
async def test_a_result_that_changed_between_lookup_and_read_is_a_clear_error(offset: int) -> None:
    viewer = ToolCallViewer(ShrinkingStore(rows=call_rows("t1", "c", "{}", "x" * 50)))
    with pytest.raises(
        ToolCallChanged, match=r"changed while it was read.*read it again from offset 0"
    ) as info:
        await viewer.invoke({"tool_call_id": "c", "offset": offset, "length": 10}, CONTEXT)
    assert info.value.code == "tool_call_changed"
