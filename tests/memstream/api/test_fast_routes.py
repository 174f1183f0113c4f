"""`FastRoutes`: appends and contexts answered without FastAPI's per-request machinery are byte for
byte what the FastAPI application answers, and anything unusual is left to the application.

Each scenario runs the same requests, in order, against two identical worlds (same keys, same
in-memory stores, a frozen clock): one app with the fast path, one without (`fast_routes=False`).
Every ASGI message sent (status, raw header list, body) and every exception raised must be equal,
and each request states whether the fast path serves it or hands it to FastAPI.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, cast

import asyncpg
import pytest

import tests.fakes.journal
import tests.fakes.threads
from core.auth import hash_key, revoke_key, visible_prefix
from core.config import Settings
from core.errors import JournalUnavailable
from core.memory.agents import AgentService
from core.memory.pinned import NoPinnedFacts
from core.threads import ThreadService
from core.turn_context import ContextReader
from memstream.api import ApiDeps, create_app
from memstream.api.fast_routes import FastRoutes, hot_route
from tests.fakes.agents import InMemoryAgents
from tests.fakes.api_keys import InMemoryApiKeys
from tests.fakes.journal import InMemoryJournal
from tests.fakes.outage import Outage
from tests.fakes.summaries import InMemorySummaryStore
from tests.fakes.threads import InMemoryThreadStore

ENV = "test"
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
ACME = "msk_" + "a" * 43
GLOBEX = "msk_" + "b" * 43
REVOKED = "msk_" + "c" * 43
UNKNOWN = "msk_" + "d" * 43
Message = dict[str, Any]
ASGI = Callable[
    [Message, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]], Awaitable[None]
]


TOOL_TURN = [
    {
        "message_id": "a1",
        "role": "assistant",
        "reasoning": "look it up",
        "content": "",
        "tool_call": {"id": "call-1", "name": "lookup", "arguments": '{"order": "A-17", "n": 1.5e3}'},
    },
    {"message_id": "r1", "role": "tool", "tool_call": {"id": "call-1", "result": '{"status": "shipped"}'}},
    {"message_id": "u1", "role": "user", "content": 'd\u00e9j\u00e0 vu \U0001f600 "quoted" <tag> &'},
]
CT_TEXT = (b"content-type", b"text/plain")
BAD_TOOL_CALL = {
    "message_id": "a2",
    "role": "assistant",
    "tool_call": {"id": "call-2", "name": "x", "arguments": "[1]"},
}


class FrozenClock(datetime):
    """`datetime` whose `now()` is always NOW: both worlds stamp the same `created_at`."""

    @classmethod
    def now(cls, tz: Any = None) -> FrozenClock:
        return cast(FrozenClock, NOW)


@pytest.fixture(autouse=True)
def frozen_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tests.fakes.journal, "datetime", FrozenClock)
    monkeypatch.setattr(tests.fakes.threads, "datetime", FrozenClock)


@pytest.fixture
def served_fast(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths of the requests the fast path answered."""
    served: list[str] = []
    serve = FastRoutes._serve

    async def counted(self: FastRoutes, hot: Any, values: Any, scope: Message, *args: Any) -> None:
        served.append(scope["path"])
        await serve(self, hot, values, scope, *args)

    monkeypatch.setattr(FastRoutes, "_serve", counted)
    return served


@dataclass
class World:
    """One app over its own stores; `keys` and `journal` can be made to fail."""

    app: ASGI
    keys: Outage[InMemoryApiKeys]
    journal: Outage[InMemoryJournal]


async def world(*, fast: bool) -> World:
    store = InMemoryApiKeys(clock=lambda: NOW)
    for n, (key, account) in enumerate([(ACME, "acme"), (GLOBEX, "globex"), (REVOKED, "acme")]):
        await store.insert(
            key_id=f"key_{n:016x}",
            environment=ENV,
            account_id=account,
            key_hash=hash_key(key),
            prefix=visible_prefix(key),
            label="",
        )
    await revoke_key(store, "acme", ENV, f"key_{2:016x}")
    keys = Outage(store, methods={"find_by_hash"}, error=None)
    keys.restore()
    journal = Outage(InMemoryJournal(), methods={"append"}, error=None)
    journal.restore()
    threads = ThreadService(InMemoryThreadStore(), journal.proxy)
    deps = ApiDeps(
        settings=Settings(environment=ENV),
        journal=journal.proxy,
        pool=cast(asyncpg.Pool, None),  # only /readyz reads it
        api_keys=keys.proxy,
        agents=AgentService(InMemoryAgents()),
        threads=threads,
        context_reader=ContextReader(journal.proxy, threads, NoPinnedFacts(), InMemorySummaryStore()),
    )
    return World(cast(ASGI, create_app(deps, fast_routes=fast)), keys, journal)


@dataclass
class Call:
    """One request; `fast`: whether the fast path answers it."""

    method: str
    path: str
    status: int
    fast: bool
    key: str | None = ACME
    body: bytes = b""
    content_type: str | None = "application/json"
    query: bytes = b""
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)

    def scope(self) -> Message:
        headers = [(b"host", b"memstream.test"), *self.headers]
        if self.key is not None:
            headers.append((b"authorization", f"Bearer {self.key}".encode()))
        if self.content_type is not None and self.body:
            headers.append((b"content-type", self.content_type.encode()))
        return {
            "type": "http",
            "method": self.method,
            "scheme": "http",
            "path": self.path,
            "raw_path": self.path.encode("utf-8", "surrogateescape"),
            "root_path": "",
            "query_string": self.query,
            "headers": headers,
            "server": ("127.0.0.1", 8080),
        }


Step = Call | Callable[[World], None]


async def answer(app: ASGI, call: Call) -> tuple[list[Message], str | None]:
    """Every message the app sent, and the exception it raised (its type and text), if any."""
    sent: list[Message] = []
    given = False

    async def receive() -> Message:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": call.body, "more_body": False}
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    try:
        await app(call.scope(), receive, send)
    except Exception as exc:
        return sent, f"{type(exc).__name__}: {exc}"
    return sent, None


async def differential(steps: list[Step], served_fast: list[str]) -> list[Any]:
    """Run `steps` on both worlds; assert equal answers, the statuses and who answered; the bodies."""
    fast, slow = await world(fast=True), await world(fast=False)
    bodies = []
    for step in steps:
        if not isinstance(step, Call):
            step(fast)
            step(slow)
            continue
        before = len(served_fast)
        fast_answer = await answer(fast.app, step)
        was_fast = len(served_fast) > before
        slow_answer = await answer(slow.app, step)
        assert len(served_fast) == before + was_fast
        shown = f"{step.method} {step.path}?{step.query.decode()} {step.body[:200]!r}"
        assert fast_answer == slow_answer, shown
        sent, _ = fast_answer
        assert sent[0]["status"] == step.status, f"{shown}: {sent}"
        assert was_fast == step.fast, f"{shown}: expected fast={step.fast}"
        body = b"".join(m.get("body", b"") for m in sent[1:])
        bodies.append(json.loads(body) if body else None)
    return bodies


def append(thread: str, *ids: str, status: int = 201, fast: bool = True, **extra: Any) -> Call:
    """An append of user messages `ids` to `thread`, by `agent` ("bot") for `user` (none)."""
    owner = {"agent_id": extra.pop("agent", "bot"), "user_id": extra.pop("user", None)}
    messages = [{"message_id": i, "role": "user", "content": f"text of {i}"} for i in ids]
    raw = json.dumps({k: v for k, v in owner.items() if v} | {"messages": messages}).encode()
    return Call("POST", f"/v1/threads/{thread}/messages", status, fast, body=raw, **extra)


def post(body: Any, status: int = 422, *, fast: bool = False, **extra: Any) -> Call:
    """An append to t1 of `body` (bytes as they are, else as JSON)."""
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return Call("POST", "/v1/threads/t1/messages", status, fast, body=raw, **extra)


def context(thread: str, *, status: int = 200, fast: bool = True, **extra: Any) -> Call:
    extra.setdefault("content_type", None)
    return Call("GET", f"/v1/threads/{thread}/context", status, fast, **extra)


async def test_appends_retries_and_conflicts(served_fast: list[str]) -> None:
    bodies = await differential(
        [
            append("t1", "m1"),
            append("t1", *(f"n{i}" for i in range(50))),
            append("t1", *(f"n{i}" for i in range(50))),  # a retry: the same stored messages
            post({"messages": [{"message_id": "m1", "role": "user", "content": "other"}]}, 409, fast=True),
            append("t1", "m2", agent="other-bot", status=409),
            append("t2", "m1", agent=None, status=404),
            append("t2", "u-m1", user="u1"),
            post({"messages": TOOL_TURN}, 201, fast=True),
            append("t1", "m3", content_type="application/json; charset=utf-8"),
            append("t1", "m4", content_type="Application/JSON"),
        ],
        served_fast,
    )
    assert [m["offset"] for m in bodies[1]["messages"]] == list(range(1, 51))
    assert bodies[2] == bodies[1]
    assert bodies[3]["error"]["code"] == "conflict"
    assert bodies[6]["messages"][0]["user_id"] == "u1"


async def test_authentication(served_fast: list[str]) -> None:
    def revoke_acme(world: World) -> None:
        records = world.keys.target.records
        records[f"key_{0:016x}"] = replace(records[f"key_{0:016x}"], revoked_at=NOW)

    bodies = await differential(
        [
            append("t1", "m1", key=None, status=401),
            append("t1", "m1", key="nope", status=401),
            append("t1", "m1", key=UNKNOWN, status=401),
            append("t1", "m1", key=REVOKED, status=401),
            append("t1", "m1", key=None, headers=[(b"authorization", b"Basic " + ACME.encode())], status=401),
            append("t1", "m1", key=None, headers=[(b"authorization", b"Bearer")], status=401),
            context("t1", key=None, status=401),
            context("t1", key=REVOKED, status=401),
            append("t1", "m1"),
            context("t1"),
            append("t1", "m5", key=None, headers=[(b"authorization", b"bearer  " + ACME.encode() + b" ")]),
            context("t1", key=None, headers=[(b"authorization", b"BEARER " + GLOBEX.encode())], status=404),
            revoke_acme,
            append("t1", "m2", status=401),
            context("t1", status=401),
            # an invalid body without a key: FastAPI authenticates first (401, not 422)
            post({"messages": []}, 401, key=None),
        ],
        served_fast,
    )
    assert all(b["error"]["code"] == "unauthorized" for b in bodies[:8])
    assert "was revoked" in bodies[-3]["error"]["message"]


async def test_bad_input_is_left_to_fastapi(served_fast: list[str]) -> None:
    path = "/v1/threads/t1/messages"
    await differential(
        [
            post(b'{"messages": []}'),
            post(b'{"agent_id": "bot", "messages": [{"role": "user"}], "x": 1}'),
            post(b'{"messages": [{"role": "robot", "content": "a"}]}'),
            post(b'{"messages": "hello"}'),
            post(b'{"agent_id": "bad id", "messages": [{"content": "a"}]}'),
            post({"messages": [BAD_TOOL_CALL]}),
            post(b"[1, 2]"),
            post(b"null"),
            post(b'{"messages": '),  # bad syntax: the guard passes it on
            post(b""),
            post(b'{"messages": [{"role": "user", "content": "a\\u0000"}]}'),
            append("t1", "m1", content_type="text/plain", status=422, fast=False),
            append("t1", "m1", content_type=None, status=422, fast=False),
            append("t1", "m1", content_type="application/vnd.memstream+json", fast=False),
            append("t1", "m2", query=b"dry_run=1", fast=False),
            append("t1", "m3", headers=[CT_TEXT], status=422, fast=False),
            append("t1", "m3", content_type=None, headers=[(b"content-type", b"application/json"), CT_TEXT]),
            append("-t1", "m1", status=422, fast=False),
            append("t" * 129, "m1", status=422, fast=False),
            append("t\x00", "m1", status=422, fast=False),
            append("t1\n", "m1", status=422, fast=False),
            Call("POST", path + "/", 307, False, body=b'{"messages": []}'),
            Call("PUT", path, 405, False, body=b'{"messages": []}'),
            context("t1", query=b"as_subagent=true", fast=False),
            context("t1", query=b"as_subagent=maybe", status=422, fast=False),
            context("t1", query=b"api_key=" + ACME.encode(), status=400, fast=False),
            context("bad id", status=422, fast=False),
            Call("HEAD", "/v1/threads/t1/context", 405, False, content_type=None),
        ],
        served_fast,
    )


async def test_contexts(served_fast: list[str]) -> None:
    window = json.dumps({"metadata": {"config": {"max_working_memory_messages": 2}}}).encode()
    bodies = await differential(
        [
            context("t1", status=404),
            append("t1", *(f"m{i}" for i in range(25))),
            context("t1"),
            context("t1", key=GLOBEX, status=404),  # another account's thread of the same id
            Call("PATCH", "/v1/threads/t1", 200, False, body=window),
            context("t1"),
            context("t1", body=b'{"ignored": true}', content_type="application/json"),
        ],
        served_fast,
    )
    assert len(bodies[2]["messages"]) == 20
    assert [m["content"] for m in bodies[5]["messages"]] == ["text of m23", "text of m24"]
    assert bodies[6] == bodies[5]


async def test_store_failures(served_fast: list[str]) -> None:
    def journal_down(world: World) -> None:
        world.journal.fail(JournalUnavailable("the journal is down"))

    def journal_up(world: World) -> None:
        world.journal.restore()

    def keys_unreachable(world: World) -> None:
        world.keys.fail(lambda: asyncpg.CannotConnectNowError("the database system is starting up"))

    def keys_refused(world: World) -> None:
        world.keys.fail(lambda: ConnectionRefusedError("connection refused"))  # not raised in asyncpg

    def keys_broken(world: World) -> None:
        world.keys.fail(lambda: RuntimeError("unexpected"))

    bodies = await differential(
        [
            journal_down,
            append("t1", "m1", status=503),
            journal_up,
            append("t1", "m1"),
            keys_unreachable,
            append("t1", "m2", status=503),
            context("t1", status=503),
            keys_refused,
            append("t1", "m2", status=500),
            keys_broken,  # no handler: ServerErrorMiddleware answers 500 and raises it again
            append("t1", "m2", status=500),
            context("t1", status=500),
        ],
        served_fast,
    )
    assert bodies[0]["error"]["code"] == "journal_unavailable"
    assert bodies[2]["error"]["code"] == "postgres_unavailable"
    assert bodies[4]["error"]["code"] == "internal_error"
    assert bodies[5]["error"]["code"] == "internal_error"


async def test_a_route_of_another_shape_is_refused() -> None:
    app = cast(Any, (await world(fast=False)).app)
    hot_route(app, "POST", "/v1/threads/{thread_id}/messages", body="body", query=())
    with pytest.raises(RuntimeError, match="is not the one"):
        hot_route(app, "POST", "/v1/threads/{thread_id}/messages", body="body", query=("after",))
    with pytest.raises(RuntimeError, match="is not the one"):
        hot_route(app, "GET", "/v1/threads/{thread_id}/messages", body=None, query=())
    FastRoutes(app.router, api=app)
