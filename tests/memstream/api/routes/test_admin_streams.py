"""The admin API's NDJSON streams (unit): one operation of a kind at a time, held only while its
body runs (a client gone before the body started holds nothing), and heartbeats while quiet."""

from __future__ import annotations

import asyncio
import json

import pytest

from core.errors import Conflict
from memstream.api.routes.admin import Exclusive, ndjson
from memstream.ops.progress import Progress, ProgressCallback


async def slow(progress: ProgressCallback) -> dict[str, int]:
    progress(Progress("work", 0, 1, "started"))
    await asyncio.sleep(0.3)
    return {"rows": 3}


async def test_a_body_never_started_holds_nothing() -> None:
    exclusive = Exclusive()
    exclusive.stream("rebuild", slow)  # the client went away before the body's first step
    response = exclusive.stream("rebuild", slow)  # not refused
    assert response.media_type == "application/x-ndjson"


async def test_a_running_body_holds_its_kind_until_it_ends() -> None:
    exclusive = Exclusive()
    body = exclusive.body("rebuild", slow)
    first = json.loads(await anext(body))
    assert first["progress"]["detail"] == "started"
    with pytest.raises(Conflict, match="a rebuild is already running"):
        exclusive.stream("rebuild", slow)
    exclusive.stream("verify", slow)  # another kind is free
    rest = [json.loads(line) async for line in body]
    assert rest[-1] == {"result": {"rows": 3}}
    exclusive.stream("rebuild", slow)  # released


async def test_a_body_closed_early_releases_its_kind() -> None:
    exclusive = Exclusive()
    body = exclusive.body("replay of x", slow)
    await anext(body)
    with pytest.raises(Conflict):
        exclusive.stream("replay of x", slow)
    await body.aclose()  # the client disconnected mid-stream: the operation is cancelled
    exclusive.stream("replay of x", slow)  # not refused
    again = exclusive.body("replay of x", slow)
    assert json.loads(await anext(again))["progress"]["detail"] == "started"  # runs, no conflict line
    await again.aclose()


async def test_a_second_body_started_meanwhile_answers_a_conflict_line() -> None:
    exclusive = Exclusive()
    first = exclusive.body("republish", slow)
    second = exclusive.body("republish", slow)  # both passed the check before either started
    await anext(first)
    assert [json.loads(line) async for line in second] == [
        {
            "error": {
                "code": "conflict",
                "message": "a republish is already running on this node: wait for it to finish",
            }
        }
    ]
    await first.aclose()


async def test_quiet_operations_send_heartbeats() -> None:
    lines = [line async for line in ndjson(slow, heartbeat_s=0.05)]
    assert lines[0].startswith(b'{"progress"')
    assert lines.count(b"\n") >= 2
    assert json.loads(lines[-1]) == {"result": {"rows": 3}}
