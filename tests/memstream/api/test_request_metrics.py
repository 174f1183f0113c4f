"""`RequestMetrics` observes each HTTP request once: by the route template an inner layer named or
the router matched, `unmatched` otherwise, and 500 when the application raised before answering."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.types import Receive, Scope, Send

from core.metrics import REGISTRY
from memstream.api.request_metrics import ROUTE, RequestMetrics

NAME = "memstream_http_request_duration_seconds_count"


def count(method: str, route: str, status: str) -> float:
    return REGISTRY.get_sample_value(NAME, {"method": method, "route": route, "status": status}) or 0.0


class Route:
    path = "/things/{thing_id}"


async def answer(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["path"] == "/named":
        scope[ROUTE] = "/named/{x}"
    elif scope["path"] == "/routed":
        scope["route"] = Route()
    elif scope["path"] == "/raises":
        raise RuntimeError("boom")
    await send({"type": "http.response.start", "status": 204, "headers": []})
    await send({"type": "http.response.body", "body": b""})


async def call(path: str) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    async def send(message: Any) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "GET", "path": path, "headers": []}
    await RequestMetrics(answer)(scope, receive, send)
    return sent


@pytest.mark.parametrize(
    ("path", "route"), [("/named", "/named/{x}"), ("/routed", "/things/{thing_id}"), ("/x/y", "unmatched")]
)
async def test_each_request_is_observed_once_by_its_route_template(path: str, route: str) -> None:
    before = count("GET", route, "204")
    sent = await call(path)
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]  # passed through
    assert count("GET", route, "204") == before + 1


async def test_a_request_whose_application_raised_counts_as_500() -> None:
    before = count("GET", "unmatched", "500")
    with pytest.raises(RuntimeError):
        await call("/raises")
    assert count("GET", "unmatched", "500") == before + 1


async def test_other_scopes_pass_through_unobserved() -> None:
    seen: list[str] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append(scope["type"])

    async def nothing() -> dict[str, Any]:
        return {}

    async def ignore(message: Any) -> None:
        pass

    await RequestMetrics(app)({"type": "lifespan"}, nothing, ignore)
    assert seen == ["lifespan"]
