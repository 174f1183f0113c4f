"""The routes by which other nodes read and append the threads of this node's journal shards (unit:
real SlateDB journals in a temporary directory, two of three shards open here): every field of a
message travels as its `journal.messages` record, an append is durable and idempotent, the
journal's errors keep their status, code and field, ids are checked again, another environment is
refused and another account's thread is another thread, a shard not open here is 503
`shard_not_local`, and only the admin token opens them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from core.config import Settings
from core.journal.models import Message, NewMessage, ThreadRef, ToolCall
from core.sharding.journal import ShardedJournal
from core.sharding.shards import shard_of
from memstream.api.errors import install_error_handlers
from memstream.api.request_guard import RequestGuard
from memstream.api.routes.shard_messages import (
    AFTER_PATH,
    APPEND_PATH,
    LAST_PATH,
    messages_of,
    shard_messages_router,
)
from sinks.slatedb.journal import SlateJournal
from streams.codecs.journal_messages import decode
from tests.sinks.slatedb.helpers import open_shards

SHARDS = 3
MISSING = 1
TOKEN = "shared-admin-token-of-the-nodes"
EARLY = datetime(2024, 5, 1, 10, 0, 0, 123456, tzinfo=UTC)


def thread_of_shard(shard: int, account: str = "acme") -> str:
    return next(f"t-{i}" for i in range(1000) if shard_of("test", account, f"t-{i}", SHARDS) == shard)


LOCAL_THREAD = thread_of_shard(0)
MESSAGES = [
    NewMessage(message_id="m-1", role="user", content="When do we deploy?", created_at=EARLY),
    NewMessage(
        message_id="m-2",
        role="assistant",
        reasoning="look it up",
        tool_call=ToolCall(id="call-1", name="calendar", arguments='{"q": "deploy"}'),
    ),
    NewMessage(message_id="m-3", role="tool", tool_call=ToolCall(id="call-1", result="Tuesdays")),
    NewMessage(message_id="m-4", role="assistant", content="On Tuesdays.\u2028Every week\u0085 ✓\r\n"),
]


@pytest.fixture
async def journals(tmp_path: Path) -> AsyncIterator[ShardedJournal[SlateJournal]]:
    journal = await open_shards(str(tmp_path), SHARDS, missing=frozenset({MISSING}))
    try:
        yield journal
    finally:
        await journal.close()


@pytest.fixture
async def owner(journals: ShardedJournal[SlateJournal], tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    app = FastAPI()
    app.add_middleware(RequestGuard)  # as on the node (`memstream.api.app.create_app`)
    install_error_handlers(app)
    settings = Settings(data_dir=tmp_path / "data", environment="test")
    app.include_router(shard_messages_router(journals, TOKEN, settings))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://owner.test",
        headers={"Authorization": f"Bearer {TOKEN}"},
    ) as client:
        yield client


def thread(thread_id: str = LOCAL_THREAD, account: str = "acme", environment: str = "test") -> dict[str, str]:
    return {"environment": environment, "account_id": account, "thread_id": thread_id}


def append_body(thread_id: str = LOCAL_THREAD, **changes: Any) -> dict[str, Any]:
    body = {
        **thread(thread_id),
        "agent_id": "bot",
        "user_id": "alice",
        "messages": [m.model_dump(mode="json", exclude_none=True) for m in MESSAGES],
    }
    return {**body, **changes}


def messages(response: httpx.Response) -> list[Message]:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/x-ndjson"
    return messages_of(response.content, "the test's owner")


def error(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    detail: dict[str, Any] = response.json()["error"]
    return detail


async def test_appends_and_reads_carry_every_field_of_the_messages(
    owner: httpx.AsyncClient, journals: ShardedJournal[SlateJournal]
) -> None:
    ref = ThreadRef(environment="test", account_id="acme", thread_id=LOCAL_THREAD)
    response = await owner.post(APPEND_PATH, json=append_body())
    written = messages(response)
    stored = await journals.after(ref, -1)
    assert written == stored  # durable when answered, every field as the journal holds it
    assert [m.offset for m in stored] == [0, 1, 2, 3]
    assert stored[0].created_at == EARLY and stored[1].tool_call == MESSAGES[1].tool_call
    assert stored[1].reasoning == "look it up" and stored[3].content == MESSAGES[3].content
    lines = response.content.split(b"\n")
    assert lines[-1] == b"" and [decode(line) for line in lines[:-1]] == stored  # the record values

    assert messages(await owner.post(AFTER_PATH, json={**thread(), "offset": 1, "limit": 2})) == stored[2:4]
    assert messages(await owner.post(AFTER_PATH, json={**thread(), "offset": -1})) == stored
    assert messages(await owner.post(LAST_PATH, json={**thread(), "n": 3})) == stored[1:]
    assert messages(await owner.post(LAST_PATH, json={**thread(), "n": 0})) == []
    empty = await owner.post(AFTER_PATH, json={**thread("t-none"), "offset": -1})
    assert messages(empty) == [] and empty.content == b""


async def test_a_retry_answers_the_stored_messages_and_a_reused_id_is_a_conflict(
    owner: httpx.AsyncClient, journals: ShardedJournal[SlateJournal]
) -> None:
    ref = ThreadRef(environment="test", account_id="acme", thread_id=LOCAL_THREAD)
    first = messages(await owner.post(APPEND_PATH, json=append_body()))
    assert messages(await owner.post(APPEND_PATH, json=append_body())) == first
    changed = append_body(messages=[{"message_id": "m-1", "role": "user", "content": "other text"}])
    assert error(await owner.post(APPEND_PATH, json=changed), 409)["code"] == "conflict"
    assert await journals.after(ref, -1) == first  # nothing written


@pytest.mark.parametrize(
    ("path", "body", "code", "field"),
    [
        (APPEND_PATH, append_body(thread_id="bad id!"), "invalid_input", "thread_id"),
        (APPEND_PATH, append_body(agent_id=""), "invalid_input", "agent_id"),
        (
            APPEND_PATH,
            append_body(messages=[{"message_id": "m-9", "role": "user", "content": ""}]),
            "invalid_input",
            "messages[0]",
        ),
        (
            APPEND_PATH,
            append_body(messages=[{"message_id": "m-9", "role": "user", "content": "a\u0000b"}]),
            "invalid_text",
            "messages[0].content",
        ),
        (AFTER_PATH, {**thread(), "offset": -2}, "invalid_input", "offset"),
        (AFTER_PATH, {**thread(), "offset": 0, "limit": -1}, "invalid_input", "limit"),
        (AFTER_PATH, {**thread(), "offset": 0, "seq": 3}, "invalid_input", "seq"),
        (LAST_PATH, {**thread(account="acme/other"), "n": 1}, "invalid_input", "account_id"),
        (LAST_PATH, {**thread(), "n": "many"}, "invalid_input", "n"),
    ],
)
async def test_bad_input_is_refused_naming_the_field_and_writes_nothing(
    owner: httpx.AsyncClient,
    journals: ShardedJournal[SlateJournal],
    path: str,
    body: dict[str, Any],
    code: str,
    field: str,
) -> None:
    problem = error(await owner.post(path, json=body), 422)
    assert problem["code"] == code, problem
    assert problem.get("field") == field, problem
    ref = ThreadRef(environment="test", account_id="acme", thread_id=LOCAL_THREAD)
    assert await journals.after(ref, -1) == []


async def test_tenancy_another_environment_is_refused_and_another_account_is_another_thread(
    owner: httpx.AsyncClient, journals: ShardedJournal[SlateJournal]
) -> None:
    written = messages(await owner.post(APPEND_PATH, json=append_body()))
    for path, extra in [(APPEND_PATH, append_body()), (AFTER_PATH, {"offset": -1}), (LAST_PATH, {"n": 5})]:
        crossing = {**extra, **thread(environment="prod")}
        problem = error(await owner.post(path, json=crossing), 403)
        assert problem["code"] == "forbidden" and "'test'" in problem["message"]
    # the same thread id in another account (of the same shard) holds nothing of acme's
    other = next(a for a in (f"globex-{i}" for i in range(1000)) if thread_of_shard(0, a) == LOCAL_THREAD)
    assert messages(await owner.post(AFTER_PATH, json={**thread(account=other), "offset": -1})) == []
    assert messages(await owner.post(LAST_PATH, json={**thread(account=other), "n": 5})) == []
    ref = ThreadRef(environment="test", account_id="acme", thread_id=LOCAL_THREAD)
    assert await journals.after(ref, -1) == written  # the refused append wrote nothing


async def test_a_shard_not_open_here_is_503_shard_not_local(
    owner: httpx.AsyncClient, journals: ShardedJournal[SlateJournal]
) -> None:
    elsewhere = thread_of_shard(MISSING)
    for path, body in [
        (APPEND_PATH, append_body(thread_id=elsewhere)),
        (AFTER_PATH, {**thread(elsewhere), "offset": -1}),
        (LAST_PATH, {**thread(elsewhere), "n": 1}),
    ]:
        response = await owner.post(path, json=body)
        assert error(response, 503)["code"] == "shard_not_local"
        assert response.headers["Retry-After"] == "1"
    for journal in journals.local().values():
        assert await journal.last_seq() == 0


async def test_only_the_admin_token_opens_the_routes(owner: httpx.AsyncClient) -> None:
    for headers in ({"Authorization": "Bearer not-the-token"}, {"Authorization": ""}):
        refused = await owner.post(AFTER_PATH, json={**thread(), "offset": -1}, headers=headers)
        assert error(refused, 401)["code"] == "unauthorized"
