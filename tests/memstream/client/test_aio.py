"""`AsyncMemstreamClient`'s logic over a scripted transport: the same rules as the sync client."""

from __future__ import annotations

import httpx
import pytest

from memstream.client import AsyncMemstreamClient, ConflictError, RetryPolicy, UnavailableError
from tests.memstream.client.scripted import Script, stored, unavailable

FAST = RetryPolicy(max_attempts=3, initial_backoff_s=0.01, max_backoff_s=0.01)


def _client(script: Script) -> AsyncMemstreamClient:
    async def sleep(seconds: float) -> None:
        script.waits.append(seconds)

    transport = httpx.MockTransport(script.handle)
    return AsyncMemstreamClient("http://node:8080", "msk_test", retry=FAST, transport=transport, sleep=sleep)


async def test_an_append_is_retried_with_the_same_generated_ids() -> None:
    script = Script(unavailable(retry_after="1"), stored("t-1", "x"))
    async with _client(script) as client:
        result = await client.append("t-1", [{"role": "user", "content": "hi"}], agent_id="bot", user_id="u")
    assert result.messages[0].message_id == "x"
    first, second = script.bodies()
    assert first == second and first["messages"][0]["message_id"].startswith("m-")
    assert script.waits == [1.0]


async def test_final_errors_and_exhausted_retries_raise_typed_errors() -> None:
    script = Script(
        httpx.Response(409, json={"error": {"code": "capability_not_bound", "message": "bind it"}})
    )
    async with _client(script) as client:
        with pytest.raises(ConflictError) as raised:
            await client.memory_store("bot", key="k", content="c", category="project_fact")
    assert raised.value.code == "capability_not_bound" and len(script.requests) == 1
    down = Script(unavailable(), unavailable(), unavailable())
    async with _client(down) as client:
        with pytest.raises(UnavailableError):
            await client.list_tools("bot")
    assert len(down.requests) == 3 and len(down.waits) == 2


async def test_a_delete_is_not_repeated_after_a_timeout() -> None:
    request = httpx.Request("DELETE", "http://node:8080")
    script = Script(httpx.ReadTimeout("slow", request=request))
    async with _client(script) as client:
        with pytest.raises(UnavailableError):
            await client.delete_memory("bot", "e-1")
    assert len(script.requests) == 1
