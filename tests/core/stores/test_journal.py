"""The `Journal` contract (`core.stores.journal`), on every journal: the in-memory fake and SlateDB.
Offsets, seqs and idempotency are asserted in full: appends (validation before anything is
written, idempotent retries, conflicts) and reads (last, after, read_from_seq, tenancy). The reads
run on the read-only reader of a SlateDB journal too (`reads`: the test writes through the writer
and reads through the reader once it caught up). What only SlateDB does (group commit, durability
across reopening, fencing, keys, object stores, the reader's waits) is in `tests/sinks/slatedb/`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from pydantic import ValidationError

from core.errors import Conflict, InvalidInput, JournalFenced, JournalUnavailable
from core.journal.models import Message, NewMessage, ToolCall
from core.journal.tokens import count_tokens
from core.stores.journal import Journal
from sinks.slatedb.journal import SlateJournal
from sinks.slatedb.reader import SlateJournalReader
from tests.fakes.journal import InMemoryJournal
from tests.sinks.slatedb.helpers import eventually, every_call_is_fenced, thread, tool_call_pair, user


@pytest.fixture(params=["memory", "slatedb"])
async def journal(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Journal]:
    """The journal under test, empty (SlateDB in the test's tmp dir)."""
    opened: Journal = (
        InMemoryJournal()
        if request.param == "memory"
        else await SlateJournal.open(f"file://{tmp_path}/journal")
    )
    yield opened
    await opened.close()


@dataclass
class Reads:
    """A journal to write through (`writer`) and a view of it to read through (`view`: the writer
    itself, or a read-only reader of it in the same test process)."""

    writer: Journal
    view: Journal

    async def caught_up(self) -> Journal:
        """The view, once it shows every seq the writer made durable."""
        target = await self.writer.last_seq()

        async def shown() -> bool:
            return await self.view.last_seq() >= target

        await eventually(shown)
        return self.view


@pytest.fixture(params=["memory", "slatedb", "slatedb-reader"])
async def reads(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Reads]:
    """An empty journal and the view the read tests read through."""
    if request.param == "memory":
        memory = InMemoryJournal()
        yield Reads(memory, memory)
        return
    url = f"file://{tmp_path}/journal"
    writer = await SlateJournal.open(url)
    view: Journal = writer
    if request.param == "slatedb-reader":
        view = await SlateJournalReader.open(url, poll_interval_ms=20)
    yield Reads(writer, view)
    await view.close()
    await writer.close()


@pytest.fixture(params=["memory", "slatedb"])
async def fenced(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Journal]:
    """A journal that appended one message, then another writer opened the same journal (and the
    first noticed it on its next append)."""
    if request.param == "memory":
        journal = InMemoryJournal()
        await journal.append(thread(), "a", None, [user("x")])
        journal.fence()
        yield journal
        return
    url = f"file://{tmp_path}/journal"
    first = await SlateJournal.open(url)
    await first.append(thread(), "a", None, [user("x")])
    second = await SlateJournal.open(url)
    try:
        with pytest.raises(JournalFenced):
            await first.append(thread(), "a", None, [user("lost")])
        yield first
        await first.close()
    finally:
        await second.close()


async def test_a_fenced_journal_refuses_every_call(fenced: Journal) -> None:
    await every_call_is_fenced(fenced)


async def test_a_closed_journal_refuses_calls(journal: Journal) -> None:
    await journal.close()
    await journal.close()  # idempotent
    with pytest.raises(JournalUnavailable, match="closed"):
        await journal.last(thread(), 1)


async def assert_nothing_written(journal: Journal, seq: int) -> None:
    assert await journal.last_seq() == seq
    assert await journal.read_from_seq(seq, 10) == []


async def test_cursors_default_to_zero_and_keep_the_last_value(journal: Journal) -> None:
    assert await journal.get_cursor("relay") == 0
    await journal.set_cursor("relay", 42)
    await journal.set_cursor("other", 7)
    await journal.set_cursor("relay", 43)
    assert (await journal.get_cursor("relay"), await journal.get_cursor("other")) == (43, 7)
    with pytest.raises(InvalidInput):
        await journal.set_cursor("relay", -1)
    with pytest.raises(InvalidInput):
        await journal.get_cursor("bad/name")


async def test_append_returns_durable_messages_with_metadata(journal: Journal) -> None:
    before = datetime.now(UTC)
    stored = await journal.append(
        thread(), "agent-1", "user-1", [user("hello world", "m1"), *tool_call_pair()]
    )
    assert [m.offset for m in stored] == [0, 1, 2]
    assert [m.seq for m in stored] == [1, 2, 3]
    assert [m.role for m in stored] == ["user", "assistant", "tool"]
    first = stored[0]
    assert (first.message_id, first.agent_id, first.user_id) == ("m1", "agent-1", "user-1")
    assert (first.environment, first.account_id, first.thread_id) == ("test", "acc1", "t1")
    assert before - timedelta(seconds=1) <= first.created_at <= datetime.now(UTC)
    assert first.token_count == count_tokens("hello world")
    assert stored[1].token_count == count_tokens('{"city": "Paris"}')
    assert stored[2].token_count == count_tokens("18 C and sunny")
    assert len(stored[1].message_id) == 32  # generated uuid4 hex
    assert await journal.last(thread(), 10) == stored
    assert await journal.last_seq() == 3


async def test_a_given_created_at_is_kept_in_utc_and_the_order_stays_the_journals(
    journal: Journal,
) -> None:
    """History imported from elsewhere keeps its times (in UTC), whatever their order; a message
    without one gets the time of the append."""
    paris = timezone(timedelta(hours=2))
    old = NewMessage(
        role="user", content="old", message_id="m1", created_at=datetime(2024, 5, 1, 12, tzinfo=paris)
    )
    older = NewMessage(
        role="assistant", content="older", message_id="m2", created_at=datetime(2020, 1, 1, tzinfo=UTC)
    )
    before = datetime.now(UTC)
    stored = await journal.append(thread(), "a", None, [old, older, user("now", "m3")])
    assert [m.offset for m in stored] == [0, 1, 2]
    assert stored[0].created_at == datetime(2024, 5, 1, 10, tzinfo=UTC)
    assert stored[0].created_at.utcoffset() == timedelta(0)
    assert stored[1].created_at == datetime(2020, 1, 1, tzinfo=UTC)
    assert before - timedelta(seconds=1) <= stored[2].created_at <= datetime.now(UTC)
    assert await journal.after(thread(), -1) == stored
    assert await journal.read_from_seq(0, 10) == stored


async def test_a_retry_with_another_created_at_conflicts(journal: Journal) -> None:
    when = datetime(2024, 5, 1, 10, tzinfo=UTC)
    first = await journal.append(
        thread(), "a", None, [NewMessage(role="user", content="hi", message_id="m1", created_at=when)]
    )
    same = NewMessage(
        role="user", content="hi", message_id="m1", created_at=when.astimezone(timezone(timedelta(hours=-5)))
    )
    assert await journal.append(thread(), "a", None, [same]) == first  # the same instant
    assert await journal.append(thread(), "a", None, [user("hi", "m1")]) == first  # time not given
    moved = NewMessage(role="user", content="hi", message_id="m1", created_at=when + timedelta(seconds=1))
    with pytest.raises(Conflict, match=r"m1.*created_at"):
        await journal.append(thread(), "a", None, [moved])
    assert await journal.last_seq() == 1


async def test_empty_append_writes_nothing(journal: Journal) -> None:
    assert await journal.append(thread(), "a", None, []) == []
    assert await journal.last_seq() == 0


async def test_offsets_are_gap_free_per_thread_under_concurrency(journal: Journal) -> None:
    threads = [thread(f"t{i}") for i in range(4)]

    async def writer(worker: int) -> list[Message]:
        out: list[Message] = []
        for round_ in range(10):
            t = threads[(worker + round_) % len(threads)]
            batch = [user(f"w{worker} r{round_} #{k}") for k in range(1 + (worker + round_) % 3)]
            result = await journal.append(t, "a", None, batch)
            assert [m.offset for m in result] == list(range(result[0].offset, result[0].offset + len(batch)))
            assert [m.seq for m in result] == list(range(result[0].seq, result[0].seq + len(batch)))
            out.extend(result)
        return out

    results = [m for chunk in await asyncio.gather(*(writer(w) for w in range(16))) for m in chunk]
    for t in threads:
        offsets = sorted(m.offset for m in results if m.thread_id == t.thread_id)
        assert offsets == list(range(len(offsets)))
        assert [m.offset for m in await journal.after(t, -1)] == offsets
    seqs = sorted(m.seq for m in results)
    assert seqs == list(range(1, len(results) + 1))
    assert await journal.last_seq() == len(results)


async def test_seq_order_matches_append_order(journal: Journal) -> None:
    written = []
    for i in range(5):
        written += await journal.append(thread(f"t{i % 2}"), "a", None, [user(f"m{i}"), user(f"n{i}")])
    relayed = await journal.read_from_seq(0, 100)
    assert [m.seq for m in relayed] == list(range(1, 11))
    assert [m.content for m in relayed] == [m.content for m in written]
    assert [m.seq for m in await journal.read_from_seq(7, 2)] == [8, 9]
    assert await journal.read_from_seq(10, 5) == []


async def test_retry_with_same_message_id_returns_the_stored_message(journal: Journal) -> None:
    first = await journal.append(thread(), "a", "u", [user("hi", "m1"), user("there", "m2")])
    again = await journal.append(thread(), "a", "u", [user("hi", "m1"), user("there", "m2")])
    assert again == first
    assert await journal.last_seq() == 2
    # a retry mixed with a new message: the new one is appended after the stored ones
    mixed = await journal.append(thread(), "a", "u", [user("there", "m2"), user("new", "m3")])
    assert mixed[0] == first[1]
    assert (mixed[1].offset, mixed[1].seq) == (2, 3)


async def test_concurrent_retries_in_one_group_write_once(journal: Journal) -> None:
    results = await asyncio.gather(
        *(journal.append(thread(), "a", None, [user("same", "dup")]) for _ in range(20))
    )
    assert all(r == results[0] for r in results)
    assert await journal.last_seq() == 1
    assert len(await journal.after(thread(), -1)) == 1


async def test_reused_message_id_with_other_content_conflicts(journal: Journal) -> None:
    await journal.append(thread(), "a", None, [user("original", "m1")])
    with pytest.raises(Conflict, match=r"m1.*content"):
        await journal.append(thread(), "a", None, [user("changed", "m1"), user("other")])
    with pytest.raises(Conflict, match="another thread"):
        await journal.append(thread("t2"), "a", None, [user("original", "m1")])
    assert await journal.last_seq() == 1


async def test_conflict_fails_only_its_caller_within_a_group(journal: Journal) -> None:
    await journal.append(thread(), "a", None, [user("original", "m1")])
    outcomes = await asyncio.gather(
        journal.append(thread(), "a", None, [user("ok-1")]),
        journal.append(thread(), "a", None, [user("changed", "m1")]),
        journal.append(thread(), "a", None, [user("ok-2")]),
        return_exceptions=True,
    )
    assert isinstance(outcomes[1], Conflict)
    assert [m.content for m in await journal.after(thread(), -1)] == ["original", "ok-1", "ok-2"]


async def test_same_message_id_in_two_accounts_is_independent(journal: Journal) -> None:
    a = await journal.append(thread(account_id="acc1"), "a", None, [user("one", "m1")])
    b = await journal.append(thread(account_id="acc2"), "a", None, [user("two", "m1")])
    assert (a[0].seq, b[0].seq) == (1, 2)


async def test_too_many_messages_are_rejected(journal: Journal) -> None:
    with pytest.raises(InvalidInput, match="at most 1000"):
        await journal.append(thread(), "a", None, [user(f"m{i}") for i in range(1001)])
    await assert_nothing_written(journal, 0)
    assert len(await journal.append(thread(), "a", None, [user(f"m{i}") for i in range(1000)])) == 1000


async def test_duplicate_ids_within_one_call_are_rejected(journal: Journal) -> None:
    with pytest.raises(InvalidInput, match="more than once") as info:
        await journal.append(thread(), "a", None, [user("a", "m1"), user("b", "m2"), user("c", "m1")])
    assert info.value.field == "messages[2].message_id"
    await assert_nothing_written(journal, 0)


@pytest.mark.parametrize(
    ("agent_id", "user_id", "field"),
    [("", None, "agent_id"), ("a/b", None, "agent_id"), ("agent", "bad id", "user_id")],
)
async def test_invalid_agent_or_user_ids_are_rejected(
    journal: Journal, agent_id: str, user_id: str | None, field: str
) -> None:
    with pytest.raises(InvalidInput) as info:
        await journal.append(thread(), agent_id, user_id, [user("x")])
    assert info.value.field == field
    await assert_nothing_written(journal, 0)


async def test_invalid_thread_ids_are_rejected(journal: Journal) -> None:
    with pytest.raises(InvalidInput) as info:
        await journal.append(thread(environment="a/b"), "a", None, [user("x")])
    assert info.value.field == "environment"
    bad = thread().model_copy(update={"thread_id": "no/slash"})  # bypasses pydantic validation
    with pytest.raises(InvalidInput):
        await journal.append(bad, "a", None, [user("x")])
    await assert_nothing_written(journal, 0)


async def test_text_that_is_not_unicode_is_rejected(journal: Journal) -> None:
    with pytest.raises(InvalidInput, match="not valid Unicode"):
        await journal.append(thread(), "a", None, [user("ok"), user("bad \ud800 text")])
    await assert_nothing_written(journal, 0)


@pytest.mark.parametrize(
    "payload",
    [
        {"role": "robot", "content": "x"},
        {"content": "no role"},
        {"role": "user", "content": ""},
        {"role": "user", "content": "x", "message_id": "has space"},
        {"role": "assistant", "tool_call": {"id": "c1", "name": "f"}},
        {"role": "assistant", "tool_call": {"id": "c1", "name": "f", "arguments": "{not json"}},
        {"role": "assistant", "tool_call": {"id": "c1", "name": "f", "arguments": "[1, 2]"}},
        {"role": "assistant", "tool_call": {"name": "f", "arguments": "{}"}},
        {"role": "tool", "tool_call": {"id": "c1"}},
        {"role": "tool", "content": "result without a tool_call"},
        {"role": "user", "content": "x", "tool_call": {"id": "c1", "result": "r"}},
        {"role": "user", "content": "x", "extra": 1},
        {"role": "user", "content": "x", "created_at": "2024-05-01T10:00:00"},  # no time zone
        {"role": "user", "content": "x", "created_at": "1969-12-31T23:59:59Z"},
        {"role": "user", "content": "x", "created_at": "2999-01-01T00:00:00Z"},
        {"role": "user", "content": "x", "created_at": "yesterday"},
    ],
)
async def test_model_rules_reject_before_anything_is_written(
    journal: Journal, payload: dict[str, object]
) -> None:
    await journal.append(thread(), "a", None, [user("before")])
    with pytest.raises(ValidationError):
        NewMessage.model_validate(payload)
    await assert_nothing_written(journal, 1)


async def test_large_and_unicode_content_round_trips(journal: Journal) -> None:
    content = "".join(chr(c) for c in range(0x20, 0x3000) if not 0xD800 <= c < 0xE000) * 20
    big = NewMessage(role="tool", tool_call=ToolCall(id="c1", result=content))
    stored = await journal.append(thread(), "a", None, [big])
    assert (await journal.last(thread(), 1))[0].tool_call == big.tool_call
    assert stored[0].token_count == count_tokens(content)


async def fill(journal: Journal, count: int, thread_id: str = "t1", account_id: str = "acc1") -> None:
    t = thread(thread_id, account_id)
    for start in range(0, count, 1000):
        chunk = range(start, min(count, start + 1000))
        await journal.append(t, "a", None, [user(f"{thread_id}-{i}") for i in chunk])


async def test_last_returns_the_newest_oldest_first(reads: Reads) -> None:
    await fill(reads.writer, 30)
    await fill(reads.writer, 5, "t2")
    journal = await reads.caught_up()
    last = await journal.last(thread(), 20)
    assert [m.offset for m in last] == list(range(10, 30))
    assert [m.content for m in await journal.last(thread(), 1)] == ["t1-29"]


async def test_last_edge_cases(reads: Reads) -> None:
    assert await reads.view.last(thread(), 5) == []  # empty thread
    await fill(reads.writer, 3)
    journal = await reads.caught_up()
    assert await journal.last(thread(), 0) == []
    assert [m.offset for m in await journal.last(thread(), 100)] == [0, 1, 2]
    with pytest.raises(InvalidInput):
        await journal.last(thread(), -1)


async def test_after_edge_cases(reads: Reads) -> None:
    assert await reads.view.after(thread(), -1) == []
    await fill(reads.writer, 2500)
    journal = await reads.caught_up()
    assert [m.offset for m in await journal.after(thread(), -1, 3)] == [0, 1, 2]
    assert [m.offset for m in await journal.after(thread(), 10, 2)] == [11, 12]
    assert len(await journal.after(thread(), -1)) == 1000  # default limit
    assert len(await journal.after(thread(), -1, 2400)) == 2400  # more than one scan batch
    assert [m.offset for m in await journal.after(thread(), 2498, 10)] == [2499]
    assert await journal.after(thread(), 2499) == []
    assert await journal.after(thread(), 10**6) == []
    assert await journal.after(thread(), 5, 0) == []
    with pytest.raises(InvalidInput):
        await journal.after(thread(), -2)
    with pytest.raises(InvalidInput):
        await journal.after(thread(), 0, -1)


async def test_read_from_seq_spans_threads_in_seq_order(reads: Reads) -> None:
    assert await reads.view.last_seq() == 0
    for i in range(6):
        await fill(reads.writer, 2, f"t{i % 3}")
    journal = await reads.caught_up()
    assert await journal.last_seq() == 12
    relayed = await journal.read_from_seq(0, 100)
    assert [m.seq for m in relayed] == list(range(1, 13))
    assert [m.thread_id for m in relayed[:6]] == ["t0", "t0", "t1", "t1", "t2", "t2"]
    assert [m.seq for m in await journal.read_from_seq(4, 3)] == [5, 6, 7]
    assert await journal.read_from_seq(0, 0) == []
    with pytest.raises(InvalidInput):
        await journal.read_from_seq(-1, 10)


async def test_threads_of_other_accounts_and_environments_are_invisible(reads: Reads) -> None:
    writer = reads.writer
    await writer.append(thread("shared", "acc1"), "a", None, [user("for acc1")])
    await writer.append(thread("shared", "acc2"), "a", None, [user("for acc2"), user("more acc2")])
    await writer.append(thread("shared", "acc1", "prod"), "a", None, [user("prod acc1")])
    await writer.append(thread("shared1", "acc1"), "a", None, [user("longer thread id")])
    journal = await reads.caught_up()
    assert [m.content for m in await journal.last(thread("shared", "acc1"), 10)] == ["for acc1"]
    assert [m.content for m in await journal.after(thread("shared", "acc2"), -1)] == ["for acc2", "more acc2"]
    assert [m.content for m in await journal.last(thread("shared", "acc1", "prod"), 10)] == ["prod acc1"]
    assert [m.offset for m in await journal.last(thread("shared", "acc2"), 10)] == [0, 1]


async def test_listeners_hear_of_every_append_that_wrote_once_it_is_readable(journal: Journal) -> None:
    heard: list[int] = []
    journal.add_append_listener(lambda: heard.append(len(heard)))
    first = await journal.append(thread("t-listen"), "agent", None, [user("hi", "m1")])
    assert heard  # called once the append was durable: the relay then reads it
    assert [m.message_id for m in await journal.read_from_seq(0, 10)] == ["m1"]
    count = len(heard)
    assert await journal.append(thread("t-listen"), "agent", None, [user("hi", "m1")]) == first
    await journal.append(thread("t-listen"), "agent", None, [user("again", "m2")])
    assert len(heard) > count  # every append that wrote is heard (a retry may be heard too)


async def test_delete_thread_removes_its_messages_and_indexes_only(journal: Journal) -> None:
    await journal.append(thread("t-del"), "a", None, [user("one", "m-1"), user("two", "m-2")])
    await journal.append(thread("t-keep"), "a", None, [user("kept", "m-3")])
    await journal.append(thread("t-del"), "a", None, [user("three", "m-4")])
    deleted = await journal.delete_thread(thread("t-del"))
    assert (deleted.messages, deleted.up_to_seq, deleted.seqs) == (3, 4, ((1, 2), (4, 4)))
    assert await journal.last(thread("t-del"), 10) == []
    assert await journal.after(thread("t-del"), -1) == []
    assert [m.seq for m in await journal.read_from_seq(0, 10)] == [3]
    assert (await journal.delete_thread(thread("t-del"))).messages == 0  # idempotent
    # the message id is free again; the thread starts anew at offset 0 with a higher seq
    again = await journal.append(thread("t-del"), "a", None, [user("one", "m-1")])
    assert (again[0].offset, again[0].seq) == (0, 5)
    assert [m.content for m in await journal.last(thread("t-keep"), 10)] == ["kept"]


async def test_seqs_are_never_reused_after_deleting_the_newest(tmp_path: Path) -> None:
    url = f"file://{tmp_path}/journal"
    journal = await SlateJournal.open(url)
    await journal.append(thread("t-a"), "a", None, [user("a")])
    await journal.append(thread("t-b"), "a", None, [user("b1"), user("b2")])
    await journal.last(thread("t-b"), 5)  # a kept window must forget the deleted messages
    assert (await journal.delete_thread(thread("t-b"))).up_to_seq == 3
    assert await journal.last(thread("t-b"), 5) == []
    await journal.close()
    reopened = await SlateJournal.open(url)
    try:
        assert await reopened.last_seq() == 3
        (message,) = await reopened.append(thread("t-c"), "a", None, [user("c")])
        assert message.seq == 4
        assert [m.seq for m in await reopened.read_from_seq(0, 10)] == [1, 4]
    finally:
        await reopened.close()


async def test_an_append_queued_behind_a_deletion_is_kept(tmp_path: Path) -> None:
    journal = await SlateJournal.open(f"file://{tmp_path}/journal")
    try:
        await journal.append(thread("t-r"), "a", None, [user("before")])
        deleting = asyncio.ensure_future(journal.delete_thread(thread("t-r")))
        appending = asyncio.ensure_future(journal.append(thread("t-r"), "a", None, [user("after")]))
        deleted, (kept,) = await asyncio.gather(deleting, appending)
        assert deleted.up_to_seq == 1 and kept.seq == 2
        assert [m.content for m in await journal.last(thread("t-r"), 5)] == ["after"]
    finally:
        await journal.close()
