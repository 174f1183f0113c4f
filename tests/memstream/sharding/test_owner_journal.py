"""`OwnerJournal` (unit): node `a` serves shard 0, node `b` shard 1, each with a real SlateDB journal
in a temporary directory; `a`'s calls naming a thread of shard 1 reach `b`'s routes in process
(`httpx.ASGITransport` over `b`'s admin routes), the failures of an owner through
`httpx.MockTransport`.

- appends and reads of a thread of `b`'s shard are carried out by `b`'s writer, every field of the
  messages kept; those of `a`'s own shard never leave `a`;
- the owner's journal errors come back as the same typed errors (code, message, field);
- an owner unknown, silent, refusing the token, answering 503 or what is not a message is
  `ShardNotLocal` / `JournalUnavailable`, never a wrong answer.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from core.config import Settings
from core.errors import Conflict, InvalidInput, JournalUnavailable, MemstreamError, ShardNotLocal
from core.inputs import InvalidText
from core.journal.models import NewMessage, ThreadRef
from core.sharding.journal import ShardedJournal
from core.sharding.shards import shard_of
from memstream.api.errors import install_error_handlers
from memstream.api.forwarding import LOCAL, UNKNOWN, Placement, Remote
from memstream.api.request_guard import RequestGuard
from memstream.api.routes.shard_journal import shard_journal_router
from memstream.api.routes.shard_messages import AFTER_PATH, APPEND_PATH, LAST_PATH, shard_messages_router
from memstream.sharding.owner_journal import DELETIONS_PATH, OwnerJournal
from sinks.slatedb.journal import SlateJournal
from tests.memstream.api.routes.test_shard_messages import EARLY
from tests.memstream.api.routes.test_shard_messages import MESSAGES as SHARD_MESSAGES

SHARDS = 2
TOKEN = "shared-admin-token-of-the-nodes"
B = Remote("b-1234", "http://b.test")
MESSAGES = SHARD_MESSAGES[:3]  # a question, a tool call and its result (created_at on the first)


def ref_of_shard(shard: int) -> ThreadRef:
    thread = next(f"t-{i}" for i in range(1000) if shard_of("test", "acme", f"t-{i}", SHARDS) == shard)
    return ThreadRef(environment="test", account_id="acme", thread_id=thread)


ON_A, ON_B = ref_of_shard(0), ref_of_shard(1)


@dataclass
class Owners:
    """Shard 0 is `a`'s (local), shard 1 `placed` (node `b` unless a test says otherwise)."""

    placed: Placement = B
    asked: list[str] = field(default_factory=list)

    def thread(self, environment: str, account_id: str, thread_id: str) -> Placement:
        self.asked.append(thread_id)
        return LOCAL if shard_of(environment, account_id, thread_id, SHARDS) == 0 else self.placed

    def projections(self) -> Placement:
        return LOCAL


async def open_shard(tmp_path: Path, shard: int) -> ShardedJournal[SlateJournal]:
    url = f"file://{tmp_path}/journal-shard-{shard}"
    return ShardedJournal(
        SHARDS, {shard: await SlateJournal.open(url, flush_interval_ms=1, shard=shard, shards=SHARDS)}
    )


@dataclass
class Nodes:
    a: OwnerJournal
    b: ShardedJournal[SlateJournal]
    owners: Owners
    requests: list[httpx.Request]


@pytest.fixture
async def nodes(tmp_path: Path) -> AsyncIterator[Nodes]:
    journal_a, journal_b = await open_shard(tmp_path, 0), await open_shard(tmp_path, 1)
    app = FastAPI()
    app.add_middleware(RequestGuard)
    install_error_handlers(app)
    settings = Settings(data_dir=tmp_path, environment="test")
    app.include_router(shard_messages_router(journal_b, TOKEN, settings))
    app.include_router(shard_journal_router(journal_b, [], TOKEN, settings))
    requests: list[httpx.Request] = []
    asgi = httpx.ASGITransport(app=app)

    class Recording(httpx.AsyncBaseTransport):
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            requests.append(request)
            return await asgi.handle_async_request(request)

    owners = Owners()
    a = OwnerJournal(journal_a, owners, TOKEN, transport=Recording())
    try:
        yield Nodes(a, journal_b, owners, requests)
    finally:
        await a.close()
        await journal_a.close()
        await journal_b.close()


async def test_a_thread_of_the_other_node_is_appended_and_read_by_its_writer(nodes: Nodes) -> None:
    written = await nodes.a.append(ON_B, "bot", "alice", MESSAGES)
    held = await nodes.b.after(ON_B, -1)
    assert written == held and [m.shard for m in held] == [1, 1, 1]
    assert held[0].created_at == EARLY and held[1].tool_call == MESSAGES[1].tool_call
    assert held[1].reasoning == "look it up" and held[2].tool_call == MESSAGES[2].tool_call
    assert await nodes.a.after(ON_B, -1) == held
    assert await nodes.a.after(ON_B, 0, 1) == held[1:2]
    assert await nodes.a.last(ON_B, 2) == held[1:]
    assert await nodes.a.append(ON_B, "bot", "alice", MESSAGES) == held  # a retry: the stored ones
    assert [r.url.path for r in nodes.requests] == [
        APPEND_PATH,
        AFTER_PATH,
        AFTER_PATH,
        LAST_PATH,
        APPEND_PATH,
    ]
    assert {r.headers["Authorization"] for r in nodes.requests} == {f"Bearer {TOKEN}"}
    assert {str(r.url.host) for r in nodes.requests} == {"b.test"}


async def test_a_thread_of_the_other_node_is_deleted_by_its_writer(nodes: Nodes) -> None:
    held = await nodes.a.append(ON_B, "bot", "alice", MESSAGES)
    deleted = await nodes.a.delete_thread(ON_B)
    assert (deleted.messages, deleted.up_to_seq) == (3, held[-1].seq)
    assert deleted.seqs == ((held[0].seq, held[-1].seq),)
    assert await nodes.b.after(ON_B, -1) == []
    assert nodes.requests[-1].url.path == DELETIONS_PATH
    nodes.owners.placed = UNKNOWN
    with pytest.raises(ShardNotLocal):  # no owner known: retried later, nothing deleted here
        await nodes.a.delete_thread(ON_B)


async def test_a_thread_of_its_own_shard_never_leaves_the_node(nodes: Nodes) -> None:
    written = await nodes.a.append(ON_A, "bot", None, MESSAGES)
    assert await nodes.a.after(ON_A, -1) == written and await nodes.a.last(ON_A, 1) == written[2:]
    assert [m.shard for m in written] == [0, 0, 0]
    assert nodes.requests == [] and nodes.owners.asked == []
    assert await nodes.b.local()[1].last_seq() == 0


async def test_the_owners_journal_errors_come_back_as_the_same_typed_errors(nodes: Nodes) -> None:
    await nodes.a.append(ON_B, "bot", "alice", MESSAGES)
    changed = [NewMessage(message_id="m-1", role="user", content="other text")]
    with pytest.raises(Conflict) as conflict:
        await nodes.a.append(ON_B, "bot", "alice", changed)
    assert conflict.value.code == "conflict" and "m-1" in conflict.value.message
    with pytest.raises(InvalidInput) as invalid:
        await nodes.a.after(ON_B, -7)
    assert (invalid.value.code, invalid.value.field) == ("invalid_input", "offset")
    with pytest.raises(InvalidInput) as too_many:
        await nodes.a.append(ON_B, "bot", "alice", [NewMessage(role="user", content="x")] * 1001)
    assert too_many.value.code == "invalid_input"
    assert len(await nodes.b.after(ON_B, -1)) == len(MESSAGES)  # nothing written


async def test_no_known_owner_is_shard_not_local_without_a_request(nodes: Nodes) -> None:
    for placed in (UNKNOWN, LOCAL):  # LOCAL: the shard is still opening here
        nodes.owners.placed = placed
        with pytest.raises(ShardNotLocal) as unknown:
            await nodes.a.after(ON_B, -1)
        assert unknown.value.shard == 1
    assert nodes.requests == []


def owner_answering(handler: Callable[[httpx.Request], httpx.Response]) -> OwnerJournal:
    journal: ShardedJournal[SlateJournal] = ShardedJournal(SHARDS)  # no shard open: every thread is b's
    return OwnerJournal(journal, Owners(), TOKEN, transport=httpx.MockTransport(handler))


def answer(status: int, body: Any) -> Callable[[httpx.Request], httpx.Response]:
    return lambda request: httpx.Response(status, json=body)


def refused(code: str, message: str = "no", **extra: Any) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, **extra}}


def silent(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("connection refused", request=request)


@pytest.mark.parametrize(
    ("handler", "raised", "code", "said"),
    [
        (silent, ShardNotLocal, "shard_not_local", "did not answer (ConnectError)"),
        (answer(503, refused("shard_not_local")), ShardNotLocal, "shard_not_local", "HTTP 503"),
        (answer(401, refused("unauthorized")), ShardNotLocal, "shard_not_local", "HTTP 401"),
        (answer(500, {"unexpected": True}), ShardNotLocal, "shard_not_local", "HTTP 500"),
        (
            answer(422, refused("invalid_text", "a NUL", field="messages[0].content")),
            InvalidText,
            "invalid_text",
            "a NUL",
        ),
        (answer(422, refused("invalid_export", "bad line")), InvalidInput, "invalid_export", "bad line"),
        (answer(409, refused("conflict", "m-1 is used")), Conflict, "conflict", "m-1 is used"),
        (answer(409, refused("invalid_input", "mixed up")), Conflict, "invalid_input", "mixed up"),
        (answer(200, {"not": "messages"}), JournalUnavailable, "journal_unavailable", "cannot read"),
    ],
)
async def test_what_an_owner_answers_besides_messages(
    handler: Callable[[httpx.Request], httpx.Response], raised: type[MemstreamError], code: str, said: str
) -> None:
    journal = owner_answering(handler)
    try:
        with pytest.raises(raised) as caught:
            await journal.append(ON_B, "bot", "alice", MESSAGES)
    finally:
        await journal.close()
    assert caught.value.code == code and said in caught.value.message, caught.value.message
    if isinstance(caught.value, ShardNotLocal):
        assert caught.value.shard == 1 and B.url in caught.value.message
    if raised is InvalidText:
        assert isinstance(caught.value, InvalidText) and caught.value.field == "messages[0].content"


async def test_the_requests_name_the_thread_and_carry_the_messages_whole() -> None:
    seen: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, content=b"")

    journal = owner_answering(record)
    try:
        assert await journal.append(ON_B, "bot", None, MESSAGES) == []
        assert await journal.after(ON_B, 4, 10) == []
        assert await journal.last(ON_B, 3) == []
    finally:
        await journal.close()
    thread = {"environment": "test", "account_id": "acme", "thread_id": ON_B.thread_id}
    bodies = [json.loads(r.content) for r in seen]
    assert [str(r.url) for r in seen] == [B.url + APPEND_PATH, B.url + AFTER_PATH, B.url + LAST_PATH]
    assert bodies[1] == {**thread, "offset": 4, "limit": 10} and bodies[2] == {**thread, "n": 3}
    assert {k: v for k, v in bodies[0].items() if k != "messages"} == {
        **thread,
        "agent_id": "bot",
        "user_id": None,
    }
    assert [NewMessage.model_validate(m) for m in bodies[0]["messages"]] == MESSAGES
    assert bodies[0]["messages"][0]["created_at"] == "2024-05-01T10:00:00.123456Z"
