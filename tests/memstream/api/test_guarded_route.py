"""`GuardedRoute`: a route behind `RequestGuard` takes the body the guard parsed instead of parsing
it again, and answers exactly as before (bad syntax, other content types, no body)."""

from __future__ import annotations

import json
import types
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import starlette.requests
from fastapi import APIRouter, FastAPI
from pydantic import BaseModel

from memstream.api.errors import install_error_handlers
from memstream.api.request_guard import GuardedRoute, RequestGuard


class Item(BaseModel):
    name: str
    tags: list[str] = []


def _app() -> FastAPI:
    app = FastAPI()
    app.add_middleware(RequestGuard)
    install_error_handlers(app)
    router = APIRouter(route_class=GuardedRoute)

    @router.post("/items")
    async def create(item: Item) -> Item:
        return item

    @router.post("/raw")
    async def raw(item: Item | None = None) -> dict[str, Any]:
        return {"item": item}

    app.include_router(router)
    return app


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=_app())
    async with httpx.AsyncClient(transport=transport, base_url="http://guarded.test") as client:
        yield client


@pytest.fixture
def starlette_json_loads(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """Every body Starlette's `Request.json()` parses itself."""
    parsed: list[bytes] = []

    def loads(body: Any, *args: Any, **kwargs: Any) -> Any:
        parsed.append(body)
        return json.loads(body, *args, **kwargs)

    monkeypatch.setattr(starlette.requests, "json", types.SimpleNamespace(loads=loads))
    return parsed


async def test_the_route_uses_the_body_the_guard_parsed(
    client: httpx.AsyncClient, starlette_json_loads: list[bytes]
) -> None:
    response = await client.post("/items", json={"name": "a", "tags": ["x", "y"]})
    assert response.status_code == 200, response.text
    assert response.json() == {"name": "a", "tags": ["x", "y"]}
    assert starlette_json_loads == []


async def test_bad_syntax_is_still_the_routes_422(
    client: httpx.AsyncClient, starlette_json_loads: list[bytes]
) -> None:
    response = await client.post("/items", content=b'{"name": ', headers={"content-type": "application/json"})
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "invalid_input"
    assert "not valid JSON" in response.json()["error"]["message"]
    assert starlette_json_loads == [b'{"name": ']  # the guard passed it on unparsed


async def test_rule_violations_are_still_the_guards_422(client: httpx.AsyncClient) -> None:
    response = await client.post(
        "/items", content=b'{"name": "a\\u0000"}', headers={"content-type": "application/json"}
    )
    assert response.status_code == 422
    assert response.json()["error"] == {
        "code": "invalid_text",
        "message": response.json()["error"]["message"],
        "field": "name",
    }


async def test_a_body_that_is_not_json_is_not_taken_as_json(client: httpx.AsyncClient) -> None:
    response = await client.post("/items", content=b'{"name": "a"}', headers={"content-type": "text/plain"})
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "invalid_input"


async def test_no_body_is_still_no_body(client: httpx.AsyncClient) -> None:
    response = await client.post("/raw")
    assert response.status_code == 200
    assert response.json() == {"item": None}
