"""Real responses validate against the app's own OpenAPI document (issue 9, finding 16: the context
lacked `content` on assistant tool calls and `summary_version` without a summary, both required by
its schema). Every main route is exercised in its several shapes, errors included."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from jsonschema import Draft202012Validator

from memstream.api import ApiDeps, create_app

from ... import summary_files
from ..conftest import Keys


@pytest.fixture
def app(memory_api: ApiDeps) -> FastAPI:
    return create_app(memory_api)


@pytest.fixture
async def api(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://memstream.test"
    ) as c:
        yield c


class Checker:
    """Validates responses against the schema the OpenAPI document gives their route and status."""

    def __init__(self, app: FastAPI) -> None:
        self.spec = app.openapi()
        self.checked: list[tuple[str, str, int]] = []

    def __call__(self, response: httpx.Response, route: str) -> Any:
        method = response.request.method.lower()
        operation = self.spec["paths"][route][method]
        status = str(response.status_code)
        assert status in operation["responses"], f"{method} {route}: {status} is not documented"
        content = operation["responses"][status].get("content", {})
        body = response.json()
        schema = content["application/json"]["schema"]
        errors = list(
            Draft202012Validator({**schema, "components": self.spec["components"]}).iter_errors(body)
        )
        assert not errors, f"{method.upper()} {route} {status}: " + "; ".join(
            f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errors
        )
        self.checked.append((method, route, response.status_code))
        return body


@pytest.fixture
def check(app: FastAPI) -> Checker:
    return Checker(app)


THREAD = "/v1/threads/{thread_id}"
MESSAGES = "/v1/threads/{thread_id}/messages"
CONTEXT = "/v1/threads/{thread_id}/context"


async def test_context_in_every_shape(
    api: httpx.AsyncClient, keys: Keys, check: Checker, memory_api: ApiDeps
) -> None:
    h = keys.acme
    made = await api.put("/v1/threads/t1", json={"agent_id": "bot", "user_id": "u1"}, headers=h)
    check(made, THREAD)
    # 1. empty: no summary, no pinned facts, no window
    empty = check(await api.get("/v1/threads/t1/context", headers=h), CONTEXT)
    assert empty["metadata"]["summary_version"] is None and empty["metadata"]["first_offset"] is None
    # 2. a window with a tool call and its result, reasoning left out
    messages = [
        {"message_id": "m0", "role": "user", "content": "weather in Oslo?"},
        {
            "message_id": "m1",
            "role": "assistant",
            "tool_call": {"id": "c1", "name": "weather", "arguments": '{"city": "Oslo"}'},
        },
        {"message_id": "m2", "role": "tool", "tool_call": {"id": "c1", "result": "rain"}},
        {"message_id": "m3", "role": "assistant", "content": "Rain.", "reasoning": "the tool said so"},
    ]
    check(await api.post("/v1/threads/t1/messages", json={"messages": messages}, headers=h), MESSAGES)
    window = check(await api.get("/v1/threads/t1/context", headers=h), CONTEXT)
    call = window["messages"][1]
    assert call["content"] is None and call["tool_calls"][0]["function"]["name"] == "weather"
    assert "tool_call_id" not in call and "tool_calls" not in window["messages"][0]
    # 3. pinned facts (a high-importance user_profile entry of the thread's user)
    bound = await api.put("/v1/agents/bot", json={"capabilities": ["memory"]}, headers=h)
    check(bound, "/v1/agents/{agent_id}")
    stored = await api.post(
        "/v1/agents/bot/tools/memory_store",
        json={
            "thread_id": "t1",
            "arguments": {
                "key": "user.city",
                "content": "The user lives in Oslo.",
                "category": "user_profile",
                "importance": 0.9,
            },
        },
        headers=h,
    )
    check(stored, "/v1/agents/{agent_id}/tools/{tool_name}")
    pinned = check(await api.get("/v1/threads/t1/context", headers=h), CONTEXT)
    assert pinned["metadata"]["pinned_count"] == 1
    # 4. and a summary
    root = Path(memory_api.settings.object_store.removeprefix("file://"))
    summary_files.write_summary(root, "acme", "bot", "t1", "The user asked about Oslo.", version=3)
    full = check(await api.get("/v1/threads/t1/context", headers=h), CONTEXT)
    assert full["metadata"]["summary_version"] == 3 and len(full["messages"]) == 2 + 4
    # 5. a sub-agent's context
    sub = check(await api.get("/v1/threads/t1/context", params={"as_subagent": "true"}, headers=h), CONTEXT)
    assert sub["metadata"]["window_size"] == 0
    # 6. errors
    check(await api.get("/v1/threads/nope/context", headers=h), CONTEXT)
    check(await api.get("/v1/threads/t1%0A/context", headers=h), CONTEXT)
    check(await api.get("/v1/threads/t1/context"), CONTEXT)


async def test_the_other_main_routes(api: httpx.AsyncClient, keys: Keys, check: Checker) -> None:
    h = keys.acme
    check(await api.put("/v1/threads/t1", json={"agent_id": "bot", "metadata": {"a": 1}}, headers=h), THREAD)
    check(await api.get("/v1/threads/t1", headers=h), THREAD)
    check(await api.patch("/v1/threads/t1", json={"metadata": {"b": 2}}, headers=h), THREAD)
    check(await api.put("/v1/threads/t1", json={"agent_id": "other"}, headers=h), THREAD)  # 409
    check(await api.get("/v1/threads/missing", headers=h), THREAD)  # 404
    body = {"messages": [{"message_id": "m1", "role": "user", "content": "hi"}]}
    check(await api.post("/v1/threads/t1/messages", json=body, headers=h), MESSAGES)
    check(await api.post("/v1/threads/t1/messages", json={"messages": []}, headers=h), MESSAGES)  # 422
    changed = {"messages": [{"message_id": "m1", "role": "user", "content": "changed"}]}
    check(await api.post("/v1/threads/t1/messages", json=changed, headers=h), MESSAGES)  # 409
    check(await api.get("/v1/threads/t1/messages", params={"after": -1}, headers=h), MESSAGES)
    check(await api.get("/v1/threads/t1/messages", params={"after": 2**64}, headers=h), MESSAGES)  # 422
    check(await api.get("/v1/threads/t1/messages"), MESSAGES)  # 401
    check(await api.get("/v1/agents/bot", headers=h), "/v1/agents/{agent_id}")
    check(
        await api.put("/v1/agents/bot", json={"capabilities": ["memory"]}, headers=h), "/v1/agents/{agent_id}"
    )
    check(await api.get("/v1/agents/bot/tools", headers=h), "/v1/agents/{agent_id}/tools")
    tool = "/v1/agents/{agent_id}/tools/{tool_name}"
    store = {
        "key": "project.deadline",
        "content": "Due in May.",
        "category": "project_fact",
        "scope": "shared",
    }
    stored = check(
        await api.post("/v1/agents/bot/tools/memory_store", json={"arguments": store}, headers=h), tool
    )
    recall = {"arguments": {"query": "deadline"}}
    check(await api.post("/v1/agents/bot/tools/memory_recall", json=recall, headers=h), tool)
    check(await api.post("/v1/agents/bot/tools/nope", json=recall, headers=h), tool)  # 404
    deep = {"arguments": '{"query": ' + "[" * 100 + "]" * 100 + "}"}
    check(await api.post("/v1/agents/bot/tools/memory_recall", json=deep, headers=h), tool)  # 422
    check(await api.get("/v1/agents/bot/memory", headers=h), "/v1/agents/{agent_id}/memory")
    entry = "/v1/agents/{agent_id}/memory/{entry_id}"
    entry_id = stored["result"]["entry"]["entry_id"]
    check(await api.get(f"/v1/agents/bot/memory/{entry_id}", headers=h), entry)
    check(await api.patch(f"/v1/agents/bot/memory/{entry_id}", json={"importance": 0.9}, headers=h), entry)
    check(await api.get("/healthz"), "/healthz")
    check(await api.get("/readyz"), "/readyz")
    assert len(check.checked) == 23
