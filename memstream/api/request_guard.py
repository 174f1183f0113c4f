"""`RequestGuard`: the checks every request passes before any route sees it.

Refused with 400 (nothing else happens):
- a credential in the query string (`?api_key=...`, `?token=...`, or any value holding an
  `msk_...` key): `api_key_in_query`. URLs end up in access logs, proxies and browser history, so
  keys are only ever read from the `Authorization` header (the access log redacts them too:
  `memstream.api.access_log`);
- more than one `Authorization` header: `duplicate_authorization` (which one counts would be up
  to each proxy on the way).

Refused with 422 (`core.inputs`; nothing is written), for every route at once:
- a NUL character in the path or a query parameter (`invalid_text`, naming the parameter);
- a JSON body that is not UTF-8 (`invalid_encoding`), nests deeper than `MAX_JSON_DEPTH`
  (`json_too_deep`), holds a NUL or a lone surrogate in any string or key (`invalid_text`), or a
  number that is not finite or has too many digits (`number_out_of_range`). The error names the
  path inside the body (`messages[0].content`).

A JSON body with bad syntax is passed on: the route answers it (422 `invalid_input`). The body is
read once here and handed to the application unchanged; when it parsed, the parsed value goes with
it in the scope (`PARSED_BODY`), and the routes of `GuardedRoute` take it from there instead of
parsing the body a second time (the same value: `decode_json_body` parses as `json.loads` does,
and refuses what it would accept only where the guard answers 422 anyway).
"""

from __future__ import annotations

import email.message
import json
from collections.abc import Callable, Coroutine
from typing import Any
from urllib.parse import parse_qsl

from fastapi import Request, Response
from fastapi.routing import APIRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from core.errors import InvalidInput
from core.ids import API_KEY_IN_TEXT
from core.inputs import InvalidText, decode_json_body
from memstream.api.errors import error_response

CREDENTIAL_PARAMS = frozenset(
    {
        "api_key",
        "apikey",
        "api-key",
        "access_token",
        "token",
        "admin_token",
        "auth",
        "authorization",
        "bearer",
    }
)
"""Query parameter names (lower-cased) refused as credentials whatever their value."""
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
PARSED_BODY = "memstream.parsed_body"
"""Scope key of `(body, value)`: the request body and its JSON value, as the guard parsed them."""


class Refused(Exception):
    """A request refused with 400 before routing."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def check_request_line(scope: Scope) -> None:
    """Refused for credentials in the query or several Authorization headers; InvalidText for a
    NUL in the path or a query parameter."""
    authorizations = sum(1 for name, _ in scope.get("headers", ()) if name.lower() == b"authorization")
    if authorizations > 1:
        raise Refused(
            "duplicate_authorization",
            f"the request has {authorizations} Authorization headers: send exactly one, "
            "'Authorization: Bearer msk_...'",
        )
    query = scope.get("query_string", b"")
    params = parse_qsl(query.decode("latin-1"), keep_blank_values=True) if query else []
    for name, value in params:
        if name.lower() in CREDENTIAL_PARAMS or API_KEY_IN_TEXT.search(value):
            raise Refused(
                "api_key_in_query",
                f"credentials are never accepted in the URL (query parameter {name!r}): URLs are written "
                "to access logs, proxies and browser history. Send the key as the header "
                "'Authorization: Bearer msk_...'. Treat a key that was sent in a URL as exposed: revoke it "
                "and issue a new one (`memstream keys create`).",
            )
    if "\x00" in scope.get("path", ""):
        raise InvalidText("the URL path contains a NUL character (%00)")
    for name, value in params:
        if "\x00" in name or "\x00" in value:
            field = name.replace("\x00", "\\u0000")
            raise InvalidText(f"query parameter {field!r} contains a NUL character (%00)", field=field)


def has_json_body(scope: Scope) -> bool:
    """Whether the application would parse the body as JSON: a JSON content type (`application/json`
    or `application/*+json`), or none on a method that carries a body."""
    content_type = None
    for name, value in scope.get("headers", ()):
        if name.lower() == b"content-type":
            content_type = value.decode("latin-1")
            break
    if content_type is None:
        return scope.get("method", "") in _BODY_METHODS
    if content_type.partition(";")[0].strip().lower() == "application/json":
        return True  # what the parsing below finds too, without its cost
    parsed = email.message.Message()
    parsed["content-type"] = content_type
    subtype = parsed.get_content_subtype()
    return parsed.get_content_maintype() == "application" and (subtype == "json" or subtype.endswith("+json"))


class RequestGuard:
    """ASGI middleware applying the module's checks to every HTTP request."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            check_request_line(scope)
            if has_json_body(scope):
                buffered = await _buffered(receive)
                if buffered is None:
                    return  # nobody to answer
                body, receive = buffered
                if body:
                    try:
                        scope[PARSED_BODY] = (body, decode_json_body(body))
                    except json.JSONDecodeError:
                        pass  # the route reports bad syntax in its usual shape
        except Refused as exc:
            await error_response(400, exc.code, exc.message)(scope, receive, send)
            return
        except InvalidInput as exc:
            await error_response(422, exc.code, exc.message, field=exc.field)(scope, receive, send)
            return
        await self.app(scope, receive, send)


async def _buffered(receive: Receive) -> tuple[bytes, Receive] | None:
    """The whole request body, and a `receive` that hands it to the application once and then
    passes on whatever comes next; None when the client went away before the body was complete."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    body = b"".join(chunks)
    replay: list[Message] = [{"type": "http.request", "body": body, "more_body": False}]

    async def replayed() -> Message:
        if replay:
            return replay.pop()
        return await receive()

    return body, replayed


class GuardedRoute(APIRoute):
    """An `APIRoute` whose request body is the one `RequestGuard` parsed (`PARSED_BODY`), when it
    did: FastAPI's handler then reads neither the body nor its JSON again (it still decides by the
    content type whether the JSON value or the raw bytes are the body, exactly as before)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def guarded(request: Request) -> Response:
            parsed = request.scope.get(PARSED_BODY)
            if parsed is not None:
                request._body, request._json = parsed
            return await handler(request)

        return guarded
