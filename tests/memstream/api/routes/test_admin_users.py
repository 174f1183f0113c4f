"""`DELETE /admin/v1/accounts/{account_id}/users/{user_id}` (unit, over the fakes of
`tests/core/user_erasure_setup.py`): bad ids and unknown users refused before streaming in the API's
error shape, then a progress line per thread deleted and the report; a stopped erasure ends in an
`erasure_incomplete` line and the same call finishes it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fastapi import APIRouter, FastAPI

from memstream.api.errors import install_error_handlers
from memstream.api.routes.admin import Exclusive
from memstream.api.routes.admin_users import add_erasure_routes
from tests.core.user_erasure_setup import Setup

pytestmark = pytest.mark.unit


@pytest.fixture
def setup() -> Setup:
    return Setup()


@pytest.fixture
async def client(setup: Setup) -> AsyncIterator[httpx.AsyncClient]:
    app = FastAPI()
    install_error_handlers(app)
    router = APIRouter(prefix="/admin/v1")
    add_erasure_routes(router, setup.erasure, "dev", Exclusive().stream)
    app.include_router(router)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://node") as c:
        yield c


def lines(response: httpx.Response) -> list[dict[str, Any]]:
    return [json.loads(line) for line in response.text.splitlines() if line.strip()]


async def test_refused_before_streaming_then_progress_and_the_report(
    setup: Setup, client: httpx.AsyncClient
) -> None:
    await setup.thread("t1", "ada")
    await setup.thread("t2", "ada")
    await setup.thread("t3", "bob")
    for path, field in (
        ("/admin/v1/accounts/acme/users/a%20b", "user_id"),
        ("/admin/v1/accounts/a%0A/users/ada", "account_id"),
    ):
        refused = await client.delete(path)
        assert refused.status_code == 422 and refused.json()["error"]["field"] == field
    unknown = await client.delete("/admin/v1/accounts/acme/users/nobody")
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "not_found"
    assert await setup.register.incomplete() == [] and len(setup.register.records) == 0

    response = await client.delete("/admin/v1/accounts/acme/users/ada")
    assert response.status_code == 200 and response.headers["content-type"] == "application/x-ndjson"
    *progress, last = lines(response)
    assert [(p["progress"]["done"], p["progress"]["detail"]) for p in progress] == [
        (1, "deleted thread t1"),
        (2, "deleted thread t2"),
    ]
    result = last["result"]
    assert (result["account_id"], result["user_id"], result["erasure_id"]) == ("acme", "ada", 1)
    assert result["completed_at"] is not None and result["erased"]["threads"]["threads"] == 2
    assert await setup.threads_of("bob") == ["t3"]


async def test_a_stopped_erasure_ends_in_an_error_line_and_the_same_call_finishes_it(
    setup: Setup, client: httpx.AsyncClient
) -> None:
    await setup.thread("t1", "ada")
    setup.caches.failures = 1
    stopped = lines(await client.delete("/admin/v1/accounts/acme/users/ada"))[-1]
    assert stopped["error"]["code"] == "erasure_incomplete"
    assert "steps done: threads, memory" in stopped["error"]["message"]
    finished = lines(await client.delete("/admin/v1/accounts/acme/users/ada"))[-1]["result"]
    assert finished["erasure_id"] == 1 and finished["erased"]["caches"] == {"evicted": 1}
