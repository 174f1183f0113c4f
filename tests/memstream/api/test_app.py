from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest
from fastapi import FastAPI
from opentelemetry import metrics, trace

from memstream.api.errors import field_path


async def test_openapi_documents_routes_and_errors(client: httpx.AsyncClient) -> None:
    spec = (await client.get("/openapi.json")).json()
    assert {
        "/healthz",
        "/readyz",
        "/v1/threads/{thread_id}",
        "/v1/threads/{thread_id}/messages",
        "/v1/threads/{thread_id}/context",
    } <= set(spec["paths"])
    append = spec["paths"]["/v1/threads/{thread_id}/messages"]["post"]
    assert {"201", "401", "404", "409", "422", "503"} <= set(append["responses"])
    assert append["responses"]["422"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "/ErrorResponse"
    )
    assert spec["components"]["schemas"]["AppendRequest"]["examples"]
    assert spec["components"]["securitySchemes"]["ApiKey"]["scheme"] == "bearer"
    assert (await client.get("/docs")).status_code == 200


async def test_unknown_route_has_error_shape(client: httpx.AsyncClient) -> None:
    response = await client.get("/v2/nothing")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


async def test_unexpected_error_is_500_without_internals(app: FastAPI) -> None:
    @app.get("/boom")
    async def boom() -> None:
        raise RuntimeError("secret internals")

    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://memstream.test") as client:
        response = await client.get("/boom")
    assert response.status_code == 500
    assert response.json() == {
        "error": {"code": "internal_error", "message": "internal server error; the failure was logged"}
    }


@pytest.mark.parametrize(
    ("loc", "field"),
    [
        (("body", "messages", 0, "content"), "messages[0].content"),
        (("path", "thread_id"), "thread_id"),
        (("body",), None),
        (("body", "metadata", "config"), "metadata.config"),
    ],
)
def test_field_path(loc: tuple[int | str, ...], field: str | None) -> None:
    assert field_path(loc) == field


async def test_requests_do_not_consult_opentelemetry(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FastAPI's native telemetry is off: no provider lookup per request (memstream configures none)."""
    lookups: list[str] = []

    def counted(name: str, real: Callable[[], object]) -> Callable[[], object]:
        def lookup() -> object:
            lookups.append(name)
            return real()

        return lookup

    monkeypatch.setattr(trace, "get_tracer_provider", counted("tracer", trace.get_tracer_provider))
    monkeypatch.setattr(metrics, "get_meter_provider", counted("meter", metrics.get_meter_provider))
    assert (await client.get("/healthz")).status_code == 200
    assert (await client.get("/v1/threads/t-1/context")).status_code == 401
    assert lookups == []
