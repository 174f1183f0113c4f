from __future__ import annotations

import math
from typing import Any

import asyncpg
import pytest

from core.auth import Principal
from core.errors import Conflict, InvalidInput, JournalUnavailable, NotFound
from core.journal.models import NewMessage
from core.threads import (
    MAX_METADATA_BYTES,
    WINDOW_FIELD,
    Thread,
    ThreadService,
    merge_patch,
    validate_metadata,
)
from sinks.postgres.threads import PostgresThreadStore
from sinks.slatedb.journal import SlateJournal

ACME = Principal(account_id="acme", environment="test", key_id="key_a")
GLOBEX = Principal(account_id="globex", environment="test", key_id="key_g")


# ---- metadata rules (pure) ----------------------------------------------------------------------


@pytest.mark.parametrize("value", [1, 5, 20])
def test_window_limit_accepts_1_to_20(value: int) -> None:
    assert validate_metadata({"config": {"max_working_memory_messages": value}})


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (0, "got 0"),
        (21, "got 21"),
        (-3, "got -3"),
        ("5", "got a string"),
        (5.5, "got a number with a fraction"),
        (5.0, "got a decimal number"),
        (True, "got a boolean"),
        (None, "got null"),
        ([5], "got an array"),
    ],
)
def test_window_limit_rejects_everything_else(value: object, reason: str) -> None:
    with pytest.raises(InvalidInput, match=reason) as info:
        validate_metadata({"config": {"max_working_memory_messages": value}})
    assert info.value.field == WINDOW_FIELD
    assert WINDOW_FIELD in info.value.message


@pytest.mark.parametrize(
    ("metadata", "field", "reason"),
    [
        ([1, 2], "metadata", "must be a JSON object, got an array"),
        ("x", "metadata", "must be a JSON object, got a string"),
        ({"config": 3}, "metadata.config", "must be an object"),
        ({"a": {"b": ["ok", "bad\x00"]}}, "metadata.a.b[1]", "NUL character"),
        ({"a\x00": 1}, "metadata", "NUL character"),
        ({"n": math.nan}, "metadata.n", "finite"),
        ({"n": math.inf}, "metadata.n", "finite"),
        ({"big": "x" * MAX_METADATA_BYTES}, "metadata", f"the limit is {MAX_METADATA_BYTES} bytes"),
    ],
)
def test_metadata_rules(metadata: object, field: str, reason: str) -> None:
    with pytest.raises(InvalidInput, match=reason) as info:
        validate_metadata(metadata)
    assert info.value.field == field


def test_metadata_depth_limit() -> None:
    deep: dict[str, Any] = {}
    node = deep
    for _ in range(40):
        node["d"] = {}
        node = node["d"]
    with pytest.raises(InvalidInput, match="nests deeper"):
        validate_metadata(deep)


def test_merge_patch_rfc7396() -> None:
    current = {"a": 1, "config": {"max_working_memory_messages": 10, "x": True}, "tags": [1, 2]}
    patch = {"a": None, "config": {"max_working_memory_messages": 5}, "tags": [3], "new": {"k": None}}
    assert merge_patch(current, patch) == {
        "config": {"max_working_memory_messages": 5, "x": True},
        "tags": [3],
        "new": {},
    }
    assert current["a"] == 1  # the input is not modified


def test_window_size() -> None:
    def thread(metadata: dict[str, Any]) -> Thread:
        return Thread.model_validate(
            {
                "environment": "test",
                "account_id": "acme",
                "thread_id": "t",
                "agent_id": "bot",
                "user_id": None,
                "metadata": metadata,
                "created_at": "2026-01-01T00:00:00Z",
                "updated_at": "2026-01-01T00:00:00Z",
            }
        )

    assert thread({}).window_size == 20
    assert thread({"config": {"max_working_memory_messages": 7}}).window_size == 7
    assert thread({"config": {}}).window_size == 20


# ---- the service against Postgres and the journal ---------------------------------------------------


@pytest.fixture
def service(pool: asyncpg.Pool, journal: SlateJournal) -> ThreadService:
    return ThreadService(PostgresThreadStore(pool), journal)


def user_message(text: str, message_id: str | None = None) -> NewMessage:
    return NewMessage(message_id=message_id, role="user", content=text)


async def test_put_creates_then_updates(service: ThreadService) -> None:
    thread, created = await service.put(ACME, "t1", agent_id="bot", user_id="u1", metadata={"a": 1})
    assert created and thread.metadata == {"a": 1}
    thread, created = await service.put(ACME, "t1", agent_id="bot", user_id="u1", metadata={"b": 2})
    assert not created and thread.metadata == {"b": 2}


@pytest.mark.parametrize(
    ("agent", "user", "reason"),
    [
        ("other", "u1", "belongs to agent 'bot'"),
        ("bot", "u2", "belongs to user 'u1'; cannot update it as user 'u2'"),
        ("bot", None, "belongs to user 'u1'; cannot update it as no user"),
    ],
)
async def test_put_cannot_change_identity(
    service: ThreadService, agent: str, user: str | None, reason: str
) -> None:
    await service.put(ACME, "t1", agent_id="bot", user_id="u1", metadata={"keep": 1})
    with pytest.raises(Conflict, match=reason):
        await service.put(ACME, "t1", agent_id=agent, user_id=user, metadata={"keep": 2})
    assert (await service.get(ACME, "t1")).metadata == {"keep": 1}


async def test_put_validates_before_writing(service: ThreadService) -> None:
    with pytest.raises(InvalidInput) as info:
        await service.put(
            ACME, "t1", agent_id="bot", user_id=None, metadata={"config": {"max_working_memory_messages": 0}}
        )
    assert info.value.field == WINDOW_FIELD
    with pytest.raises(InvalidInput) as info:
        await service.put(ACME, "bad id!", agent_id="bot", user_id=None, metadata={})
    assert info.value.field == "thread_id"
    with pytest.raises(NotFound):
        await service.get(ACME, "t1")


async def test_patch_merges_and_validates_result(service: ThreadService) -> None:
    await service.put(
        ACME, "t1", agent_id="bot", user_id=None, metadata={"config": {"max_working_memory_messages": 9}}
    )
    thread = await service.patch_metadata(ACME, "t1", {"config": {"x": 1}, "tag": "a"})
    assert thread.metadata == {"config": {"max_working_memory_messages": 9, "x": 1}, "tag": "a"}
    with pytest.raises(InvalidInput) as info:
        await service.patch_metadata(ACME, "t1", {"config": {"max_working_memory_messages": 25}})
    assert info.value.field == WINDOW_FIELD
    with pytest.raises(InvalidInput, match="the limit is"):
        await service.patch_metadata(ACME, "t1", {"pad": "x" * MAX_METADATA_BYTES})
    assert (await service.get(ACME, "t1")).metadata == thread.metadata
    with pytest.raises(NotFound):
        await service.patch_metadata(GLOBEX, "t1", {"tag": "b"})


async def test_append_auto_creates_with_agent_id(service: ThreadService, journal: SlateJournal) -> None:
    with pytest.raises(NotFound, match="pass agent_id"):
        await service.append(ACME, "t1", agent_id=None, user_id=None, messages=[user_message("hi")])
    stored = await service.append(ACME, "t1", agent_id="bot", user_id="u1", messages=[user_message("hi")])
    assert [(m.offset, m.agent_id, m.user_id, m.account_id) for m in stored] == [(0, "bot", "u1", "acme")]
    thread = await service.get(ACME, "t1")
    assert (thread.agent_id, thread.user_id) == ("bot", "u1")
    # later appends may omit the ids; the thread's own are used
    more = await service.append(ACME, "t1", agent_id=None, user_id=None, messages=[user_message("again")])
    assert [(m.offset, m.agent_id, m.user_id) for m in more] == [(1, "bot", "u1")]


@pytest.mark.parametrize(("agent", "user"), [("other", None), ("bot", "u2"), (None, "u2")])
async def test_append_contradicting_thread_is_conflict(
    service: ThreadService, journal: SlateJournal, agent: str | None, user: str | None
) -> None:
    await service.put(ACME, "t1", agent_id="bot", user_id="u1", metadata={})
    with pytest.raises(Conflict):
        await service.append(ACME, "t1", agent_id=agent, user_id=user, messages=[user_message("hi")])
    assert await journal.last((await service.get(ACME, "t1")).ref, 10) == []


async def test_rejected_append_does_not_create_the_thread(service: ThreadService) -> None:
    duplicate_ids = [user_message("a", "m1"), user_message("b", "m1")]
    with pytest.raises(InvalidInput, match="more than once"):
        await service.append(ACME, "t1", agent_id="bot", user_id=None, messages=duplicate_ids)
    with pytest.raises(NotFound):
        await service.get(ACME, "t1")


async def test_journal_failure_keeps_the_created_thread(
    service: ThreadService, journal: SlateJournal
) -> None:
    """The journal may have written before failing: the thread row stays so a retry finds it."""
    await journal.close()
    with pytest.raises(JournalUnavailable, match="closed"):
        await service.append(ACME, "t1", agent_id="bot", user_id=None, messages=[user_message("hi")])
    assert (await service.get(ACME, "t1")).agent_id == "bot"


async def test_messages_after_pages_and_is_scoped(service: ThreadService) -> None:
    await service.append(
        ACME, "t1", agent_id="bot", user_id=None, messages=[user_message(f"m{i}") for i in range(5)]
    )
    page = await service.messages_after(ACME, "t1", 1, 2)
    assert [m.content for m in page] == ["m2", "m3"]
    with pytest.raises(NotFound):
        await service.messages_after(GLOBEX, "t1", -1, 10)
    with pytest.raises(InvalidInput) as info:
        await service.messages_after(ACME, "t1", -1, 1001)
    assert info.value.field == "limit"


async def test_a_remembered_thread_still_shows_changes_made_on_another_node(
    pool: asyncpg.Pool, journal: SlateJournal
) -> None:
    here = ThreadService(PostgresThreadStore(pool), journal)
    there = ThreadService(PostgresThreadStore(pool), journal)  # another node: its own memory
    await there.put(ACME, "t1", agent_id="bot", user_id="u1", metadata={})
    await here.append(ACME, "t1", agent_id=None, user_id=None, messages=[user_message("one")])  # read
    await there.patch_metadata(ACME, "t1", {"config": {"max_working_memory_messages": 4}})
    assert (await here.get(ACME, "t1")).window_size == 4  # the context window is read fresh
    with pytest.raises(NotFound):
        await here.append(GLOBEX, "t1", agent_id=None, user_id=None, messages=[user_message("x")])
    with pytest.raises(Conflict, match="belongs to user 'u1'"):
        await here.append(ACME, "t1", agent_id=None, user_id="u2", messages=[user_message("x")])
    [stored] = await here.append(ACME, "t1", agent_id=None, user_id=None, messages=[user_message("two")])
    assert (stored.agent_id, stored.user_id, stored.offset) == ("bot", "u1", 1)
