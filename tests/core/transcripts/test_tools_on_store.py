"""The journal tools over the real transcript store (chdb, fresh database per test): scope and
role filtering, tenant isolation, limit bounds, summaries on and off, and paging a 200 KB result."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from core.chat.offline import OfflineChatModel
from core.errors import InvalidInput
from core.stores.transcripts import TranscriptRow, TranscriptScope
from core.transcripts.caller import JournalContext
from core.transcripts.tool_call_view import MAX_PAGE_BYTES, ToolCallNotFound
from core.transcripts.tools import JournalTools
from sinks.clickhouse.store import ClickHouseTranscriptStore
from tests.sinks.clickhouse.rows import row, tool_exchange

AGENT = TranscriptScope(environment="test", account_id="acct", agent_id="agent")
ALICE = TranscriptScope(environment="test", account_id="acct", agent_id="agent", user_id="alice")


def conversation() -> list[TranscriptRow]:
    """Alice's two threads, Bob's one, and the same words in places no search may reach."""
    return [
        row(
            "a1", 0, "You are a support bot. Never discuss the invoice audit.", role="system", user_id="alice"
        ),
        row("a1", 1, "My invoice 42 shows a wrong refund amount.", user_id="alice"),
        row(
            "a1",
            2,
            "I checked invoice 42: the refund is 30 euros.",
            role="assistant",
            user_id="alice",
            reasoning="the invoice refund secret reasoning",
        ),
        row(
            "a1",
            3,
            "invoice refund tool output",
            role="tool",
            user_id="alice",
            tool_call_id="call-a",
            tool_result='{"invoice": 42, "refund": 30}',
        ),
        row("a2", 0, "Can I get a refund for my March invoice?", user_id="alice"),
        row(
            "a2",
            1,
            "Yes, a refund for a March invoice takes five days.",
            role="assistant",
            user_id="alice",
        ),
        row("b1", 0, "Bob here: my invoice has a refund problem too.", user_id="bob"),
        row("n1", 0, "A refund question without any user for the invoice team."),
        # other tenants with the same words
        row("x1", 0, "invoice refund in another account", account_id="other", user_id="alice"),
        row("y1", 0, "invoice refund of another agent", agent_id="other-agent", user_id="alice"),
        row("z1", 0, "invoice refund in another environment", environment="prod", user_id="alice"),
    ]


@pytest.fixture
async def tools(transcript_store: ClickHouseTranscriptStore) -> JournalTools:
    await transcript_store.insert(conversation())
    return JournalTools.build(transcript_store, OfflineChatModel())


async def search(tools: JournalTools, who: TranscriptScope, thread: str | None = None, **args: Any) -> Any:
    return await tools.invoke("journal_message_search", args, JournalContext(scope=who, thread_id=thread))


async def view(tools: JournalTools, who: TranscriptScope, thread: str | None = None, **args: Any) -> Any:
    return await tools.invoke("journal_tool_call_view", args, JournalContext(scope=who, thread_id=thread))


async def test_scope_all_threads_vs_current_thread(tools: JournalTools) -> None:
    everywhere = await search(tools, ALICE, "a2", query="invoice refund", summarize=False)
    assert {m["thread_id"] for m in everywhere["messages"]} == {"a1", "a2"}
    here = await search(tools, ALICE, "a2", query="invoice refund", scope="current_thread", summarize=False)
    assert {m["thread_id"] for m in here["messages"]} == {"a2"} and here["count"] == 2
    with pytest.raises(InvalidInput) as info:
        await search(tools, ALICE, None, query="invoice", scope="current_thread")
    assert info.value.field == "arguments.scope"


async def test_only_user_and_assistant_content_is_searched_or_returned(tools: JournalTools) -> None:
    found = await search(
        tools, ALICE, query="invoice refund audit secret reasoning output", limit=50, summarize=False
    )
    assert found["count"] == 4
    assert {m["role"] for m in found["messages"]} == {"user", "assistant"}
    texts = " ".join(m["content"] for m in found["messages"])
    for hidden in ("support bot", "audit", "secret reasoning", "tool output"):
        assert hidden not in texts
    assert (await search(tools, ALICE, query="audit", summarize=False))["count"] == 0  # system only
    assert (await search(tools, ALICE, query="secret", summarize=False))["count"] == 0  # reasoning only
    assert (await search(tools, ALICE, query="output", summarize=False))["count"] == 0  # tool message only
    summarized = await search(tools, ALICE, query="invoice refund", limit=50)
    assert {ref["role"] for t in summarized["threads"] for ref in t["matches"]} == {"user", "assistant"}


async def test_tenant_isolation(tools: JournalTools) -> None:
    def threads(result: Any) -> set[str]:
        return {m["thread_id"] for m in result["messages"]}

    # a user sees only their own threads; without a user, only the threads without a user
    assert threads(await search(tools, ALICE, query="invoice refund", limit=50, summarize=False)) == {
        "a1",
        "a2",
    }
    bob = TranscriptScope(environment="test", account_id="acct", agent_id="agent", user_id="bob")
    assert threads(await search(tools, bob, query="invoice refund", limit=50, summarize=False)) == {"b1"}
    assert threads(await search(tools, AGENT, query="invoice refund", limit=50, summarize=False)) == {"n1"}
    # other account, agent, environment: their own rows only
    for scope, expected in [
        (TranscriptScope(environment="test", account_id="other", agent_id="agent", user_id="alice"), {"x1"}),
        (replace(ALICE, agent_id="other-agent"), {"y1"}),
        (TranscriptScope(environment="prod", account_id="acct", agent_id="agent", user_id="alice"), {"z1"}),
        (TranscriptScope(environment="test", account_id="nobody", agent_id="agent"), set()),
    ]:
        assert (
            threads(await search(tools, scope, query="invoice refund", limit=50, summarize=False)) == expected
        )
    # a tool call is found only in its own scope
    assert (await view(tools, ALICE, tool_call_id="call-a"))["content"] == '{"invoice": 42, "refund": 30}'
    for scope in (bob, TranscriptScope(environment="test", account_id="other", agent_id="agent")):
        with pytest.raises(ToolCallNotFound):
            await view(tools, scope, tool_call_id="call-a")


async def test_a_thread_without_user_sees_only_threads_without_user(
    transcript_store: ClickHouseTranscriptStore,
) -> None:
    """Called from a thread that has no user (scope without a user, thread n1), every path (search
    over all threads or the current one, with and without summaries; tool-call view by id with
    and without `thread_id`) reaches only the threads without a user: never Alice's or Bob's,
    even for a tool-call id that Alice's thread uses too."""
    await transcript_store.insert(
        [
            *conversation(),
            row("n1", 1, "", role="tool", tool_call_id="call-a", tool_result="the anonymous result"),
            row("n2", 0, "Another invoice refund note that nobody owns."),
        ]
    )
    tools = JournalTools.build(transcript_store, OfflineChatModel())
    for thread in ("n1", None):
        found = await search(tools, AGENT, thread, query="invoice refund", limit=50, summarize=False)
        assert {m["thread_id"] for m in found["messages"]} == {"n1", "n2"}
        summarized = await search(tools, AGENT, thread, query="invoice refund bob", limit=50)
        assert {t["thread_id"] for t in summarized["threads"]} == {"n1", "n2"}
        assert "Bob" not in str(summarized) and "30 euros" not in str(summarized)
    here = await search(tools, AGENT, "n1", query="invoice refund", scope="current_thread", summarize=False)
    assert {m["thread_id"] for m in here["messages"]} == {"n1"}
    here = await search(tools, AGENT, "n1", query="invoice refund", scope="current_thread")
    assert [t["thread_id"] for t in here["threads"]] == ["n1"]

    for thread in ("n1", None):
        own = await view(tools, AGENT, thread, tool_call_id="call-a")
        assert (own["thread_id"], own["content"]) == ("n1", "the anonymous result")
        for users_thread in ("a1", "b1"):
            with pytest.raises(ToolCallNotFound, match="without a user"):
                await view(tools, AGENT, thread, tool_call_id="call-a", thread_id=users_thread)
    # and the other way round: Alice never reaches the thread without a user
    alices = await view(tools, ALICE, "a1", tool_call_id="call-a")
    assert (alices["thread_id"], alices["content"]) == ("a1", '{"invoice": 42, "refund": 30}')
    with pytest.raises(ToolCallNotFound):
        await view(tools, ALICE, "a1", tool_call_id="call-a", thread_id="n1")


async def test_limit_bounds(transcript_store: ClickHouseTranscriptStore) -> None:
    await transcript_store.insert([row(f"t{n % 7}", n, f"budget line {n} for the launch") for n in range(60)])
    tools = JournalTools.build(transcript_store, OfflineChatModel())
    for limit in (0, 51):
        with pytest.raises(InvalidInput, match=f"must be 1..50, got {limit}") as info:
            await search(tools, AGENT, query="budget", limit=limit)
        assert info.value.field == "arguments.limit"
    one = await search(tools, AGENT, query="budget", limit=1, summarize=False)
    assert (one["count"], len(one["messages"])) == (1, 1)
    fifty = await search(tools, AGENT, query="budget launch", limit=50, summarize=False)
    assert fifty["count"] == 50 and len({(m["thread_id"], m["offset"]) for m in fifty["messages"]}) == 50
    default = await search(tools, AGENT, query="budget", summarize=False)
    assert default["count"] == 10
    grouped = await search(tools, AGENT, query="budget", limit=50)
    assert sum(len(t["matches"]) for t in grouped["threads"]) == 50 and len(grouped["threads"]) == 7


async def test_summarize_on_and_off(tools: JournalTools) -> None:
    off = await search(tools, ALICE, query="refund invoice", summarize=False)
    assert off["summarized"] is False and "threads" not in off
    assert all(
        set(m) == {"thread_id", "message_id", "offset", "role", "content", "created_at"}
        for m in off["messages"]
    )
    on = await search(tools, ALICE, query="refund invoice")
    assert on["summarized"] is True and "messages" not in on
    assert [t["thread_id"] for t in on["threads"]] == list(
        dict.fromkeys(m["thread_id"] for m in off["messages"])
    )
    for thread in on["threads"]:
        assert isinstance(thread["summary"], str) and thread["summary"].strip()
        assert "refund" in thread["summary"].lower()
        assert all(set(ref) == {"message_id", "offset", "role"} for ref in thread["matches"])
    a1 = next(t for t in on["threads"] if t["thread_id"] == "a1")
    assert (
        "30 euros" in a1["summary"] and "secret" not in a1["summary"] and "support bot" not in a1["summary"]
    )
    assert sorted(ref["offset"] for ref in a1["matches"]) == [1, 2]


@pytest.mark.parametrize("unit", ["abcdefghij", "é€😀 ü"], ids=["ascii", "multibyte"])
async def test_paging_a_200_kb_tool_result(transcript_store: ClickHouseTranscriptStore, unit: str) -> None:
    result = unit * (200_000 // len(unit.encode()) + 1)
    assert len(result.encode()) >= 200_000
    await transcript_store.insert(
        tool_exchange(
            "t1", "fetch the report", "call-big", "report", '{"year": 2026}', result, user_id="alice"
        )
    )
    tools = JournalTools.build(transcript_store, OfflineChatModel())
    text, offset, pages = "", 0, 0
    while offset is not None:
        page = await view(tools, ALICE, "t1", tool_call_id="call-big", offset=offset)
        assert page["total_bytes"] == len(result.encode())
        assert 0 < page["length"] <= MAX_PAGE_BYTES and page["length"] == len(page["content"].encode())
        assert (page["tool_name"], page["thread_id"], page["part"]) == ("report", "t1", "result")
        text += page["content"]
        offset = page["next_offset"]
        pages += 1
    assert text == result
    total = len(result.encode())
    if unit.isascii():
        assert pages == -(-total // MAX_PAGE_BYTES)  # full pages
    else:  # a page loses at most 3 bytes to a character boundary
        assert -(-total // MAX_PAGE_BYTES) <= pages <= -(-total // (MAX_PAGE_BYTES - 3))
    arguments = await view(tools, ALICE, "t1", tool_call_id="call-big", part="arguments")
    assert (arguments["content"], arguments["next_offset"]) == ('{"year": 2026}', None)
    if not unit.isascii():
        with pytest.raises(InvalidInput, match="falls inside a UTF-8 character"):
            await view(tools, ALICE, "t1", tool_call_id="call-big", offset=1)
    with pytest.raises(InvalidInput, match="past the end"):
        await view(tools, ALICE, "t1", tool_call_id="call-big", offset=len(result.encode()) + 1)


async def test_a_tool_call_id_repeated_in_a_thread_pages_one_call(
    transcript_store: ClickHouseTranscriptStore,
) -> None:
    """A server that emits `call_0` every turn: every page of one view comes from one call (the
    most recent unless `occurrence` says otherwise), with null for the arguments not used."""
    short, long = "short", "a much longer second result with the same id " * 3
    first = tool_exchange("t1", "first ask", "call_0", "lookup", '{"n": 1}', short, user_id="alice")
    second = [
        replace(r, offset=r.offset + 3, message_id=f"t1-m{r.offset + 3}")
        for r in tool_exchange("t1", "second ask", "call_0", "lookup", '{"n": 2}', long, user_id="alice")
    ]
    await transcript_store.insert(first + second)
    tools = JournalTools.build(transcript_store, OfflineChatModel())
    text, offset = "", 0
    while True:
        page = await view(
            tools, ALICE, None, tool_call_id="call_0", offset=offset, length=7, part=None, occurrence=None
        )
        assert (page["occurrence"], page["occurrences"], page["total_bytes"]) == (2, 2, len(long))
        text += page["content"]
        if page["next_offset"] is None:
            break
        offset = page["next_offset"]
    assert text == long
    earlier = await view(tools, ALICE, "t1", tool_call_id="call_0", occurrence=1, offset=2, thread_id=None)
    assert (earlier["content"], earlier["total_bytes"], earlier["next_offset"]) == ("ort", 5, None)
    arguments = await view(tools, ALICE, "t1", tool_call_id="call_0", occurrence=1, part="arguments")
    assert arguments["content"] == '{"n": 1}'
    with pytest.raises(ToolCallNotFound, match=r"occurrence must be 1\.\.2"):
        await view(tools, ALICE, "t1", tool_call_id="call_0", occurrence=3)
