"""One JSON error shape for every failure: `{"error": {"code", "message", "field"?, "details"?,
"owner"?}}` (`owner`: the node that serves a request another node refused, `memstream.api.forwarding`).

Typed errors map to statuses: InvalidInput 422 (with its field), NotFound 404, Conflict 409,
Unauthorized 401 (with `WWW-Authenticate: Bearer`), Forbidden 403, JournalFenced /
JournalUnavailable / SummaryUnavailable / DeletionIncomplete / ErasureIncomplete 503, ShardNotLocal
503 `shard_not_local` with `Retry-After` (the thread's journal shard is not open on this node).
PostgreSQL being unreachable (`sinks.postgres.errors.is_postgres_unavailable`: the driver's
connection errors, wherever a route or its authentication meets them) is 503
`postgres_unavailable` with `Retry-After`, on every route. Request validation errors (bad JSON,
wrong types, message rules) are 422 `invalid_input` (or the specific code of `core.inputs`:
`invalid_text`, `json_too_deep`, `number_out_of_range`, `invalid_encoding`) naming the first
offending field (`messages[0].content`); `details` lists every problem when there are several.
Unexpected exceptions are 500 `internal_error` without internals in the body.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import asyncpg
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from core.errors import (
    Conflict,
    DeletionIncomplete,
    ErasureIncomplete,
    Forbidden,
    InvalidInput,
    JournalFenced,
    JournalUnavailable,
    MemstreamError,
    NotFound,
    PostgresUnavailable,
    ShardNotLocal,
    Unauthorized,
)
from core.inputs import INPUT_ERROR_CODES
from core.summaries.models import SummaryUnavailable
from sinks.postgres.errors import RETRY_AFTER_S, is_postgres_unavailable

log = logging.getLogger(__name__)

_STATUS: tuple[tuple[type[MemstreamError], int], ...] = (
    (InvalidInput, 422),
    (NotFound, 404),
    (Conflict, 409),
    (Unauthorized, 401),
    (Forbidden, 403),
    (JournalFenced, 503),
    (JournalUnavailable, 503),
    (SummaryUnavailable, 503),
    (PostgresUnavailable, 503),
    (DeletionIncomplete, 503),
    (ShardNotLocal, 503),
    (ErasureIncomplete, 503),
)
SHARD_RETRY_AFTER_S = 1
"""When a thread's journal shard is not open on this node (it is moving, or another node owns it)."""
_DRIVER_ERRORS: tuple[type[Exception], ...] = (OSError, asyncpg.PostgresError, asyncpg.InterfaceError)
"""Handled apart from other unexpected errors, so a Postgres outage answers 503 without a traceback."""
_HTTP_CODES = {
    404: "not_found",
    405: "method_not_allowed",
    401: "unauthorized",
    403: "forbidden",
    413: "payload_too_large",
}
_LOCATIONS = {"body", "path", "query", "header", "cookie"}


class FieldProblem(BaseModel):
    field: str | None = None
    message: str


class ErrorDetail(BaseModel):
    code: str
    message: str
    field: str | None = None
    details: list[FieldProblem] | None = None
    owner: str | None = None
    """The URL of the node that serves the request, when this node answered 503 because it does
    not (`memstream.api.forwarding`)."""


class ErrorResponse(BaseModel):
    """The body of every error response."""

    error: ErrorDetail


def error_response(
    status: int,
    code: str,
    message: str,
    *,
    field: str | None = None,
    details: list[FieldProblem] | None = None,
    headers: dict[str, str] | None = None,
    owner: str | None = None,
) -> JSONResponse:
    detail = ErrorDetail(code=code, message=message, field=field, details=details, owner=owner)
    body = ErrorResponse(error=detail)
    return JSONResponse(body.model_dump(mode="json", exclude_none=True), status_code=status, headers=headers)


def status_of(exc: MemstreamError) -> int:
    for kind, status in _STATUS:
        if isinstance(exc, kind):
            return status
    return 500


def field_path(loc: Sequence[int | str]) -> str | None:
    """`("body", "messages", 0, "content")` -> `messages[0].content`."""
    parts = list(loc)
    if parts and parts[0] in _LOCATIONS:
        parts = parts[1:]
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or None


def _problem(err: dict[str, Any]) -> FieldProblem:
    loc = err.get("loc", ())
    kind = err.get("type", "")
    if kind == "json_invalid":
        reason = (err.get("ctx") or {}).get("error", "malformed JSON")
        return FieldProblem(message=f"the request body is not valid JSON: {reason}")
    field = field_path(loc)
    if field is None and kind == "missing":
        return FieldProblem(message="a JSON request body is required")
    msg = str(err.get("msg", "invalid value"))
    for noise in ("Value error, ", "Assertion failed, "):
        msg = msg.removeprefix(noise)
    return FieldProblem(field=field, message=f"{field}: {msg}" if field else msg)


async def _memstream_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, MemstreamError)
    status = status_of(exc)
    if status >= 500:
        log.warning("%s %s failed: %s: %s", request.method, request.url.path, exc.code, exc.message)
    field = exc.field if isinstance(exc, InvalidInput) else None
    headers: dict[str, str] | None = None
    if isinstance(exc, Unauthorized):
        headers = {"WWW-Authenticate": "Bearer"}
    elif isinstance(exc, PostgresUnavailable):
        headers = {"Retry-After": str(exc.retry_after_s)}
    elif isinstance(exc, ShardNotLocal):
        headers = {"Retry-After": str(SHARD_RETRY_AFTER_S)}
    return error_response(status, exc.code, exc.message, field=field, headers=headers)


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = exc.errors()
    problems = [_problem(dict(err)) for err in errors] or [FieldProblem(message="invalid request")]
    first = problems[0]
    kind = str(errors[0].get("type", "")) if errors else ""
    return error_response(
        422,
        kind if kind in INPUT_ERROR_CODES else InvalidInput.code,
        first.message,
        field=first.field,
        details=problems if len(problems) > 1 else None,
    )


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    message = str(exc.detail)
    if exc.status_code == 404 and message == "Not Found":
        message = f"no route {request.method} {request.url.path}: see /docs"
    return error_response(exc.status_code, code, message, headers=dict(exc.headers or {}) or None)


def postgres_unavailable() -> PostgresUnavailable:
    """The error a request answers when PostgreSQL cannot be reached (503 `postgres_unavailable`)."""
    return PostgresUnavailable(
        f"the database (PostgreSQL) is unavailable; the request did not complete. Retry in "
        f"{RETRY_AFTER_S} s (appends with the same message_ids); `memstream status` shows whether "
        "PostgreSQL runs.",
        retry_after_s=RETRY_AFTER_S,
    )


async def _unexpected_error(request: Request, exc: Exception) -> JSONResponse:
    if is_postgres_unavailable(exc):
        log.warning("%s %s failed: PostgreSQL is unavailable (%r)", request.method, request.url.path, exc)
        unavailable = postgres_unavailable()
        return error_response(
            503, unavailable.code, unavailable.message, headers={"Retry-After": str(RETRY_AFTER_S)}
        )
    log.exception("%s %s failed unexpectedly", request.method, request.url.path, exc_info=exc)
    return error_response(500, "internal_error", "internal server error; the failure was logged")


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(MemstreamError, _memstream_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    for driver_error in _DRIVER_ERRORS:
        app.add_exception_handler(driver_error, _unexpected_error)
    app.add_exception_handler(Exception, _unexpected_error)


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses=` entries documenting the error shape for these statuses."""
    descriptions = {
        401: "Missing, malformed, unknown or revoked API key.",
        403: "The API key may not do this (a key issued for an MCP gateway).",
        404: "No such thread in the caller's account.",
        409: "The request contradicts the stored thread (agent_id/user_id never change) or a message_id "
        "was reused with other content.",
        422: "Invalid input; `field` names the offending field. Nothing was written.",
        503: "The journal, the summary store or the database (`postgres_unavailable`, with "
        "`Retry-After`) is unavailable, or the journal is fenced; the call did not succeed. Retry "
        "appends with the same message_ids.",
    }
    return {status: {"model": ErrorResponse, "description": descriptions[status]} for status in statuses}
