"""Typed exceptions of the client: one class per family of failure, each carrying what the server
said (`code`, `message`, `field`) and the HTTP `status` (None when no answer arrived).

The server's errors all look like `{"error": {"code", "message", "field"?, "details"?}}`
(`memstream.api.errors`); `error_from_response` maps a response to the family of its status:
401/403 `AuthError`, 404 `NotFoundError`, 409 `ConflictError`, other 4xx `InvalidInputError`,
503 (and a gateway's 502/504) `UnavailableError`, anything else `ServerError`. A request that got
no answer (connection refused, timeout, broken connection) is `UnavailableError` with
`status=None` and the code `connect_failed` (never sent) or `network_error`.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import httpx


class MemstreamApiError(Exception):
    """Base class of every error the client raises for a failed call."""

    def __init__(
        self,
        message: str,
        *,
        code: str,
        status: int | None,
        field: str | None = None,
        details: list[dict[str, Any]] | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(f"{code}: {message}" if status is None else f"{status} {code}: {message}")
        self.message = message
        self.code = code
        self.status = status
        self.field = field
        self.details = details or []
        self.retry_after_s = retry_after_s


class AuthError(MemstreamApiError):
    """401/403: a missing, malformed, unknown or revoked API key, or one not allowed here."""


class NotFoundError(MemstreamApiError):
    """404: no such thread, entry, tool or tool call for this caller (or no such route)."""


class ConflictError(MemstreamApiError):
    """409: the request contradicts stored state (a message_id reused with other content, a thread's
    agent/user, an unbound capability, a taken key)."""


class InvalidInputError(MemstreamApiError):
    """Another 4xx (mostly 422): invalid input; `field` names the offending field. Nothing was written."""


class UnavailableError(MemstreamApiError):
    """503 (the journal, the database or a store is unavailable; the call did not succeed), a
    gateway's 502/504, or no answer at all (`status` None; code `connect_failed` or
    `network_error`). What the retry rules retry (`memstream.client.retry`)."""


class ServerError(MemstreamApiError):
    """500 or any other unexpected status: the server failed; the failure was logged there."""


def retry_after_s(headers: httpx.Headers) -> float | None:
    """`Retry-After` in seconds (delta-seconds or an HTTP date), None when absent or unreadable."""
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def _family(status: int) -> type[MemstreamApiError]:
    if status in (401, 403):
        return AuthError
    if status == 404:
        return NotFoundError
    if status == 409:
        return ConflictError
    if status in (502, 503, 504):
        return UnavailableError
    if 400 <= status < 500:
        return InvalidInputError
    return ServerError


def error_from_response(response: httpx.Response) -> MemstreamApiError:
    """The typed error of a non-2xx response (its body need not be memstream's error shape)."""
    status = response.status_code
    code, message, field, details = f"http_{status}", response.reason_phrase or "error", None, None
    try:
        body = json.loads(response.content) if response.content else None
    except ValueError:
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        code = str(error.get("code") or code)
        message = str(error.get("message") or message)
        field = error.get("field") if isinstance(error.get("field"), str) else None
        raw = error.get("details")
        details = [d for d in raw if isinstance(d, dict)] if isinstance(raw, list) else None
    elif response.content:
        message = response.text[:500]
    return _family(status)(
        message,
        code=code,
        status=status,
        field=field,
        details=details,
        retry_after_s=retry_after_s(response.headers),
    )


def network_error(exc: httpx.TransportError) -> UnavailableError:
    """A request that got no answer (`httpx.TransportError`): code `connect_failed` when it never
    reached the server (no connection made: safe to send again), else `network_error` (a timeout
    or a broken connection: the server may have run it)."""
    not_sent = isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout))
    return UnavailableError(
        f"{type(exc).__name__}: {exc or 'no answer'}",
        code="connect_failed" if not_sent else "network_error",
        status=None,
    )
