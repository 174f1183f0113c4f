"""Micro-benchmark of the HTTP API's own CPU cost per request, in process (prints figures; not a test).

    .venv/bin/python bench/bench_asgi.py                  # 2,000 requests per kind, 3 rounds
    .venv/bin/python bench/bench_asgi.py -n 5000 --loop asyncio

What is measured: the FastAPI application of `memstream.api.create_app`, called directly as an
ASGI app (no sockets, no HTTP parser, no server) over the in-memory fakes of `tests/fakes` (API
keys, threads, journal, summaries): microseconds per request, sequential, for an append of one
500-character message (`POST /v1/threads/{id}/messages`, a new `message_id` each time, over 64
threads) and for `GET /v1/threads/{id}/context` (process CPU time, so that other processes on the
machine disturb the figures less; the minimum of the rounds is the steadiest). The same calls
straight to the services (`ThreadService.append`, `ContextReader.get_context`, no HTTP) are timed
too: the difference is the API's own cost - routing, middleware, the authentication dependency,
body parsing and validation, response rendering. "FastAPI alone" is the same app without
`FastRoutes` (`create_app(deps, fast_routes=False)`: every request through FastAPI's machinery).
Each kind is checked to answer 201/200 before it is timed. Run it with the branch to compare on `PYTHONPATH`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast

import asyncpg

from core.auth import issue_key, verify
from core.config import Settings
from core.journal.models import NewMessage
from core.memory.agents import AgentService
from core.memory.pinned import NoPinnedFacts
from core.threads import ThreadService
from core.turn_context import ContextReader
from memstream.api import ApiDeps, create_app
from tests.fakes.agents import InMemoryAgents
from tests.fakes.api_keys import InMemoryApiKeys
from tests.fakes.journal import InMemoryJournal
from tests.fakes.summaries import InMemorySummaryStore
from tests.fakes.threads import InMemoryThreadStore

Message = dict[str, Any]
ASGI = Callable[
    [Message, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]], Awaitable[None]
]
THREADS = 64


def _scope(method: str, path: str, headers: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8080),
    }


async def _call(app: ASGI, method: str, path: str, headers: list[tuple[bytes, bytes]], body: bytes) -> int:
    """One request; its status."""
    sent = False
    status = 0

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    await app(_scope(method, path, headers), receive, send)
    return status


async def _timed(label: str, n: int, request: Callable[[int], Awaitable[int]], expected: int) -> float:
    for i in range(50):  # warm-up, and the status check
        status = await request(-1 - i)
        if status != expected:
            raise SystemExit(f"{label}: answered {status}, expected {expected}")
    start = time.process_time()
    for i in range(n):
        await request(i)
    return (time.process_time() - start) / n * 1e6


async def run(n: int, rounds: int) -> None:
    settings = Settings(environment="bench")
    keys = InMemoryApiKeys()
    journal = InMemoryJournal()
    threads = ThreadService(InMemoryThreadStore(), journal)
    deps = ApiDeps(
        settings=settings,
        journal=journal,
        pool=cast(asyncpg.Pool, None),  # only /readyz reads it
        api_keys=keys,
        agents=AgentService(InMemoryAgents()),
        threads=threads,
        context_reader=ContextReader(journal, threads, NoPinnedFacts(), InMemorySummaryStore()),
    )
    fast_app = cast(ASGI, create_app(deps))
    fastapi_app = cast(ASGI, create_app(deps, fast_routes=False))
    app = fast_app
    key = await issue_key(keys, "acme", "bench", "bench")
    auth = [(b"host", b"memstream.bench"), (b"authorization", f"Bearer {key}".encode())]
    post_headers = [*auth, (b"content-type", b"application/json")]
    content = "x" * 500
    run_id = time.monotonic_ns()

    async def append(i: int) -> int:
        body = {
            "agent_id": "bench-agent",
            "messages": [{"message_id": f"m-{run_id}-{i}", "role": "user", "content": content}],
        }
        path = f"/v1/threads/t-{i % THREADS}/messages"
        return await _call(app, "POST", path, post_headers, json.dumps(body).encode())

    async def context(i: int) -> int:
        return await _call(app, "GET", f"/v1/threads/t-{i % THREADS}/context", auth, b"")

    principal = await verify(keys, key, "bench")

    async def service_append(i: int) -> int:
        message = NewMessage(message_id=f"s-{run_id}-{i}", role="user", content=content)
        await threads.append(
            principal, f"t-{i % THREADS}", agent_id="bench-agent", user_id=None, messages=[message]
        )
        return 201

    async def service_context(i: int) -> int:
        await deps.context_reader.get_context(principal, f"t-{i % THREADS}")
        return 200

    figures: dict[str, list[float]] = {
        "append 1 message": [],
        "  FastAPI alone": [],
        "  service alone": [],
        "GET context": [],
        "  FastAPI alone ": [],
        "  reader alone": [],
    }
    for _ in range(rounds):
        run_id = time.monotonic_ns()
        app = fast_app
        figures["append 1 message"].append(await _timed("append", n, append, 201))
        figures["GET context"].append(await _timed("context", n, context, 200))
        app = fastapi_app
        figures["  FastAPI alone"].append(await _timed("append", n, append, 201))
        figures["  FastAPI alone "].append(await _timed("context", n, context, 200))
        figures["  service alone"].append(await _timed("service append", n, service_append, 201))
        figures["  reader alone"].append(await _timed("reader", n, service_context, 200))
    for label, values in figures.items():
        rounds_text = ", ".join(f"{v:.0f}" for v in values)
        print(
            f"{label:18} min {min(values):5.0f}  median {statistics.median(values):5.0f} us CPU/request"
            f"  (rounds: {rounds_text})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-n", type=int, default=2000, help="requests per kind and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop")
    args = parser.parse_args()
    import memstream

    print(f"memstream from {Path(memstream.__file__).parent.parent}, loop {args.loop}, n={args.n}")
    if args.loop == "uvloop":
        import uvloop

        uvloop.run(run(args.n, args.rounds))
    else:
        asyncio.run(run(args.n, args.rounds))


if __name__ == "__main__":
    main()
