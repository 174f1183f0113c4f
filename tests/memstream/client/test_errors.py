"""Error mapping: the server's error body and status to one typed exception per family."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx
import pytest

from memstream.client.errors import (
    AuthError,
    ConflictError,
    InvalidInputError,
    MemstreamApiError,
    NotFoundError,
    ServerError,
    UnavailableError,
    error_from_response,
    network_error,
)


def _error(status: int, code: str, message: str = "m", **extra: object) -> httpx.Response:
    return httpx.Response(status, json={"error": {"code": code, "message": message, **extra}})


@pytest.mark.parametrize(
    ("status", "family"),
    [
        (400, InvalidInputError),
        (401, AuthError),
        (403, AuthError),
        (404, NotFoundError),
        (409, ConflictError),
        (413, InvalidInputError),
        (422, InvalidInputError),
        (500, ServerError),
        (502, UnavailableError),
        (503, UnavailableError),
        (504, UnavailableError),
    ],
)
def test_each_status_maps_to_its_family(status: int, family: type[MemstreamApiError]) -> None:
    error = error_from_response(_error(status, "some_code", "what happened"))
    assert type(error) is family
    assert (error.status, error.code, error.message) == (status, "some_code", "what happened")


def test_field_and_details_are_kept() -> None:
    details = [
        {"field": "messages[0].role", "message": "bad"},
        {"field": "messages[1].content", "message": "x"},
    ]
    error = error_from_response(
        _error(422, "invalid_input", "messages[0].role: bad", field="messages[0].role", details=details)
    )
    assert error.field == "messages[0].role"
    assert error.details == details
    assert "422 invalid_input: messages[0].role: bad" == str(error)


def test_retry_after_is_read_in_seconds_or_as_a_date() -> None:
    seconds = httpx.Response(
        503, headers={"Retry-After": "2"}, json={"error": {"code": "postgres_unavailable", "message": "m"}}
    )
    assert error_from_response(seconds).retry_after_s == 2.0
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    dated = error_from_response(httpx.Response(503, headers={"Retry-After": when}))
    assert dated.retry_after_s is not None and 25 < dated.retry_after_s <= 30
    assert error_from_response(httpx.Response(503, headers={"Retry-After": "soon"})).retry_after_s is None
    assert error_from_response(httpx.Response(503)).retry_after_s is None


def test_a_body_that_is_not_memstreams_still_gives_a_typed_error() -> None:
    proxy = error_from_response(httpx.Response(502, text="<html>Bad Gateway</html>"))
    assert isinstance(proxy, UnavailableError)
    assert (proxy.code, proxy.message) == ("http_502", "<html>Bad Gateway</html>")
    empty = error_from_response(httpx.Response(500))
    assert isinstance(empty, ServerError) and empty.code == "http_500"


def test_no_answer_is_unavailable_and_says_whether_the_request_was_sent() -> None:
    request = httpx.Request("GET", "http://x")
    refused = network_error(httpx.ConnectError("refused", request=request))
    assert (refused.status, refused.code) == (None, "connect_failed")
    timed_out = network_error(httpx.ReadTimeout("slow", request=request))
    assert (timed_out.status, timed_out.code) == (None, "network_error")
    broken = network_error(httpx.RemoteProtocolError("closed", request=request))
    assert isinstance(broken, UnavailableError) and broken.code == "network_error"
