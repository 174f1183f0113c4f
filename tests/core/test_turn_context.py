from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import pytest

from core.auth import Principal
from core.errors import InvalidInput, JournalFenced, JournalUnavailable, NotFound
from core.journal.models import Message, NewMessage, ThreadRef, ToolCall
from core.journal.tokens import count_tokens
from core.memory.models import MemoryScope
from core.memory.pinned import (
    PINNED_CLOSE,
    PINNED_DISCLAIMER,
    PINNED_OPEN,
    NoPinnedFacts,
    PinnedFact,
    PinnedFactsProvider,
)
from core.summaries.models import Summary, SummaryUnavailable, summary_key
from core.threads import ThreadService
from core.turn_context import (
    SUMMARY_PREFIX,
    Context,
    ContextReader,
    drop_orphan_tool_results,
    to_context_message,
)
from sinks.objectstore.summaries import ObjectStoreSummaryReader, ObjectStoreSummaryWriter, open_object_store
from sinks.postgres.threads import PostgresThreadStore
from sinks.slatedb.journal import SlateJournal
from tests.memstream.summary_files import write_summary

ACME = Principal(account_id="acme", environment="test", key_id="key_a")
GLOBEX = Principal(account_id="globex", environment="test", key_id="key_g")


class StaticPinnedFacts:
    """A real `PinnedFactsProvider` implementation with fixed facts per (account, agent, user)."""

    def __init__(self, facts: dict[tuple[str, str, str | None], list[PinnedFact]]) -> None:
        self.facts = facts
        self.scopes: list[MemoryScope] = []

    async def pinned(self, scope: MemoryScope) -> list[PinnedFact]:
        self.scopes.append(scope)
        return self.facts.get((scope.account_id, scope.agent_id, scope.user_id), [])


@pytest.fixture
def objects(tmp_path: Path) -> Path:
    root = tmp_path / "objects"
    root.mkdir()
    return root


@pytest.fixture
def threads(pool: asyncpg.Pool, journal: SlateJournal) -> ThreadService:
    return ThreadService(PostgresThreadStore(pool), journal)


def make_reader(
    journal: SlateJournal, threads: ThreadService, objects: Path, pinned: PinnedFactsProvider | None = None
) -> ContextReader:
    summaries = ObjectStoreSummaryReader(open_object_store(f"file://{objects}"))
    return ContextReader(journal, threads, pinned or NoPinnedFacts(), summaries)


async def append_users(
    threads: ThreadService, thread_id: str, count: int, *, user: str | None = "u1"
) -> None:
    messages = [NewMessage(message_id=f"m{i}", role="user", content=f"message {i}") for i in range(count)]
    await threads.append(ACME, thread_id, agent_id="bot", user_id=user, messages=messages)


async def test_window_only_is_last_20(threads: ThreadService, journal: SlateJournal, objects: Path) -> None:
    await append_users(threads, "t1", 30)
    context = await make_reader(journal, threads, objects).get_context(ACME, "t1")
    assert [m.content for m in context.messages] == [f"message {i}" for i in range(10, 30)]
    assert all(m.role == "user" for m in context.messages)
    info = context.metadata
    assert (info.window_size, info.window_messages, info.first_offset, info.last_offset) == (20, 20, 10, 29)
    assert (info.summary_version, info.pinned_count) == (None, 0)
    assert info.token_count == sum(count_tokens(f"message {i}") for i in range(10, 30))


async def test_metadata_lowers_the_window(
    threads: ThreadService, journal: SlateJournal, objects: Path
) -> None:
    await append_users(threads, "t1", 30)
    await threads.patch_metadata(ACME, "t1", {"config": {"max_working_memory_messages": 3}})
    context = await make_reader(journal, threads, objects).get_context(ACME, "t1")
    assert [m.content for m in context.messages] == ["message 27", "message 28", "message 29"]
    assert context.metadata.window_size == 3


async def test_order_is_pinned_summary_window(
    threads: ThreadService, journal: SlateJournal, objects: Path
) -> None:
    await append_users(threads, "t1", 4)
    write_summary(objects, "acme", "bot", "t1", "The user likes blue bikes.", version=5)
    facts = [PinnedFact(fact_id="f1", content="Name: Ada"), PinnedFact(fact_id="f2", content="Plan: pro")]
    provider = StaticPinnedFacts({("acme", "bot", "u1"): facts})
    context = await make_reader(journal, threads, objects, provider).get_context(ACME, "t1")

    roles_and_text = [(m.role, m.content) for m in context.messages]
    pinned_text = (
        f"{PINNED_OPEN}\n<fact>Name: Ada</fact>\n<fact>Plan: pro</fact>\n{PINNED_CLOSE}\n{PINNED_DISCLAIMER}"
    )
    assert roles_and_text[0] == ("system", pinned_text)
    assert roles_and_text[1] == ("system", SUMMARY_PREFIX + "The user likes blue bikes.")
    assert roles_and_text[2:] == [("user", f"message {i}") for i in range(4)]
    info = context.metadata
    assert (info.pinned_count, info.summary_version, info.summary_last_message_offset) == (2, 5, 9)
    assert info.token_count == (
        count_tokens(pinned_text)
        + count_tokens(SUMMARY_PREFIX + "The user likes blue bikes.")
        + sum(count_tokens(f"message {i}") for i in range(4))
    )
    assert provider.scopes == [
        MemoryScope(environment="test", account_id="acme", agent_id="bot", user_id="u1")
    ]


async def test_summary_without_pinned(threads: ThreadService, journal: SlateJournal, objects: Path) -> None:
    await append_users(threads, "t1", 2)
    write_summary(objects, "acme", "bot", "t1", "Earlier: greetings.")
    context = await make_reader(journal, threads, objects).get_context(ACME, "t1")
    assert [m.role for m in context.messages] == ["system", "user", "user"]
    assert context.messages[0].content == SUMMARY_PREFIX + "Earlier: greetings."


async def test_empty_thread_has_empty_context(
    threads: ThreadService, journal: SlateJournal, objects: Path
) -> None:
    await threads.put(ACME, "t1", agent_id="bot", user_id=None, metadata={})
    context = await make_reader(journal, threads, objects).get_context(ACME, "t1")
    assert context.messages == []
    assert (
        context.metadata.window_messages,
        context.metadata.first_offset,
        context.metadata.token_count,
    ) == (0, None, 0)


async def test_other_accounts_thread_is_not_found(
    threads: ThreadService, journal: SlateJournal, objects: Path
) -> None:
    await append_users(threads, "t1", 2)
    write_summary(objects, "acme", "bot", "t1", "secret summary")
    with pytest.raises(NotFound):
        await make_reader(journal, threads, objects).get_context(GLOBEX, "t1")


async def test_closed_journal_fails_the_call(
    threads: ThreadService, journal: SlateJournal, objects: Path
) -> None:
    await append_users(threads, "t1", 2)
    await journal.close()
    with pytest.raises(JournalUnavailable, match="closed"):
        await make_reader(journal, threads, objects).get_context(ACME, "t1")


async def test_fenced_journal_fails_the_call(
    threads: ThreadService, journal: SlateJournal, objects: Path, tmp_path: Path
) -> None:
    await append_users(threads, "t1", 2)
    other = await SlateJournal.open(f"file://{tmp_path}/journal", flush_interval_ms=1)  # fences `journal`
    try:
        await other.append(
            (await threads.get(ACME, "t1")).ref,
            "bot",
            "u1",
            [NewMessage(role="user", content="from the new writer")],
        )
        with pytest.raises((JournalFenced, JournalUnavailable)):
            # the first failing call may be the write that discovers the fence
            await threads.append(
                ACME, "t1", agent_id=None, user_id=None, messages=[NewMessage(role="user", content="x")]
            )
        with pytest.raises(JournalFenced, match="fenced"):
            await make_reader(journal, threads, objects).get_context(ACME, "t1")
    finally:
        await other.close()


async def test_corrupt_summary_fails_the_call(
    threads: ThreadService, journal: SlateJournal, objects: Path
) -> None:
    await append_users(threads, "t1", 1)
    path = objects / summary_key("test", "acme", "bot", "t1")
    path.parent.mkdir(parents=True)
    path.write_text("{")
    with pytest.raises(SummaryUnavailable):
        await make_reader(journal, threads, objects).get_context(ACME, "t1")


def _message(**fields: object) -> Message:
    base: dict[str, object] = {
        "message_id": "m1",
        "environment": "test",
        "account_id": "acme",
        "agent_id": "bot",
        "user_id": None,
        "thread_id": "t1",
        "offset": 0,
        "seq": 1,
        "content": "",
        "created_at": "2026-11-29T10:00:00Z",
        "token_count": 1,
    }
    return Message.model_validate(base | fields)


def test_openai_shapes() -> None:
    call = _message(role="assistant", tool_call=ToolCall(id="c1", name="lookup", arguments='{"q": 1}'))
    result = _message(role="tool", tool_call=ToolCall(id="c1", result='{"ok": true}'))
    reasoned = _message(role="assistant", content="Done.", reasoning="thinking...")
    assert to_context_message(call).model_dump(exclude_none=True) == {
        "role": "assistant",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": '{"q": 1}'}}
        ],
    }
    assert to_context_message(result).model_dump(exclude_none=True) == {
        "role": "tool",
        "tool_call_id": "c1",
        "content": '{"ok": true}',
    }
    assert to_context_message(reasoned).model_dump(exclude_none=True) == {
        "role": "assistant",
        "content": "Done.",
    }


async def test_no_pinned_facts_provider_returns_none() -> None:
    scope = MemoryScope(environment="test", account_id="acme", agent_id="bot", user_id=None)
    assert await NoPinnedFacts().pinned(scope) == []


async def test_window_never_starts_with_an_orphan_tool_result(
    threads: ThreadService, journal: SlateJournal, objects: Path
) -> None:
    # a tool call (offset 0) and its result (1), then 19 messages: the last 20 start on the result
    messages = [
        NewMessage(
            message_id="call",
            role="assistant",
            tool_call=ToolCall(id="c1", name="lookup", arguments='{"q": 1}'),
        ),
        NewMessage(message_id="result", role="tool", tool_call=ToolCall(id="c1", result="found")),
    ]
    messages += [NewMessage(message_id=f"u{i}", role="user", content=f"message {i}") for i in range(19)]
    await threads.append(ACME, "t1", agent_id="bot", user_id="u1", messages=messages)
    context = await make_reader(journal, threads, objects).get_context(ACME, "t1")
    assert all(m.role == "user" for m in context.messages)  # the orphan result is left out
    assert context.metadata.orphan_tool_results_dropped == 1
    assert (context.metadata.window_messages, context.metadata.first_offset) == (19, 2)

    # a thread whose window holds the call keeps call and result together
    again = [m.model_copy(update={"message_id": f"t2-{m.message_id}"}) for m in messages[:3]]
    await threads.append(ACME, "t2", agent_id="bot", user_id="u1", messages=again)
    context = await make_reader(journal, threads, objects).get_context(ACME, "t2")
    assert [m.role for m in context.messages] == ["assistant", "tool", "user"]
    assert context.metadata.orphan_tool_results_dropped == 0


def test_only_leading_tool_results_are_dropped() -> None:
    call = _message(offset=1, role="assistant", tool_call=ToolCall(id="c1", name="f", arguments="{}"))
    result = _message(offset=2, role="tool", tool_call=ToolCall(id="c1", result="r"))
    orphan = _message(offset=0, role="tool", tool_call=ToolCall(id="c0", result="r"))
    assert drop_orphan_tool_results([orphan, call, result]) == ([call, result], 1)
    assert drop_orphan_tool_results([call, result]) == ([call, result], 0)
    assert drop_orphan_tool_results([orphan]) == ([], 1)


async def test_a_point_in_time_context_is_the_one_the_model_got_then(
    threads: ThreadService, journal: SlateJournal, objects: Path
) -> None:
    """`get_context_at(N)`: the window up to N, the summary version in force before message N + 1
    was appended (covering nothing after N), today's pinned facts already written by then."""
    start = datetime(2026, 1, 1, 9, 0, tzinfo=UTC)
    messages = [
        NewMessage(
            message_id=f"m{i}", role="user", content=f"message {i}", created_at=start + timedelta(minutes=i)
        )
        for i in range(10)
    ]
    await threads.append(ACME, "t1", agent_id="bot", user_id="u1", messages=messages)
    await threads.patch_metadata(ACME, "t1", {"config": {"max_working_memory_messages": 3}})
    writer = ObjectStoreSummaryWriter(open_object_store(f"file://{objects}"))
    ref = ThreadRef(environment="test", account_id="acme", thread_id="t1")
    for version, (covers, minutes) in enumerate([(3, 4.5), (6, 7.5)], start=1):
        summary = Summary(
            version=version,
            timestamp=start + timedelta(minutes=minutes),
            last_message_offset=covers,
            last_message_id=f"m{covers}",
            content=f"summary {version}",
            token_count=2,
            message_count=covers + 1,
        )
        await writer.write(ref, "bot", summary, expected_version=version - 1 or None)
    facts = [
        PinnedFact(fact_id="early", content="Name: Ada", updated_at=start + timedelta(minutes=1)),
        PinnedFact(fact_id="late", content="Plan: pro", updated_at=start + timedelta(minutes=5.5)),
    ]
    reader = make_reader(journal, threads, objects, StaticPinnedFacts({("acme", "bot", "u1"): facts}))

    def shown(context: Context) -> tuple[list[str], int | None, int]:
        texts = [m.content or "" for m in context.messages if m.role == "user"]
        return texts, context.metadata.summary_version, context.metadata.pinned_count

    at5 = await reader.get_context_at(ACME, "t1", 5)
    assert shown(at5) == (["message 3", "message 4", "message 5"], 1, 2)
    assert (at5.metadata.at_offset, at5.metadata.pinned_left_out, at5.metadata.last_offset) == (5, 0, 5)
    assert at5.messages[1].content == SUMMARY_PREFIX + "summary 1"
    assert shown(await reader.get_context_at(ACME, "t1", 7)) == (
        ["message 5", "message 6", "message 7"],
        2,
        2,
    )
    at3 = await reader.get_context_at(ACME, "t1", 3)  # the next message came at 9:04, before "late"
    assert shown(at3) == (["message 1", "message 2", "message 3"], None, 1)
    assert at3.metadata.pinned_left_out == 1
    at0 = await reader.get_context_at(ACME, "t1", 0)  # "early" was written as message 1 came
    assert shown(at0) == (["message 0"], None, 0)
    last = await reader.get_context_at(ACME, "t1", 9)  # no next message: today's summary and facts
    current = await reader.get_context(ACME, "t1")
    assert last.messages == current.messages
    assert last.metadata == current.metadata.model_copy(update={"at_offset": 9})
    with pytest.raises(InvalidInput, match="no message at offset 10"):
        await reader.get_context_at(ACME, "t1", 10)
    with pytest.raises(NotFound):
        await reader.get_context_at(GLOBEX, "t1", 5)
