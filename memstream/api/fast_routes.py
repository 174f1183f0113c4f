"""`FastRoutes`: the two hottest routes without FastAPI's per-request machinery, answering exactly
as the FastAPI application would.

`POST /v1/threads/{thread_id}/messages` (append) and `GET /v1/threads/{thread_id}/context` are
most of a node's requests; FastAPI's middleware chain, routing, dependency solving and response
model handling cost about a quarter of the node's CPU on them. This ASGI middleware sits right
inside `RequestGuard` and serves the ordinary shape of these two requests itself, running the
application's own pieces of the route - the authentication dependency (`ApiKeyBearer`), the body
field (`AppendRequest`, validated from the JSON the guard parsed), the endpoint function, the
response model serialization (`fastapi.routing.serialize_response`), the status code and the
exception handlers (`app.exception_handlers`, looked up by the exception's class as Starlette's
`ExceptionMiddleware` does) - so status, headers and body are byte for byte the application's.

Anything unusual is passed to the FastAPI application unchanged (the guard buffered the body, so
it is replayed there), which then answers as always: another method or path shape, a thread id
that is not an `ID`, any query string, a `root_path`, an append whose content type is not plainly
`application/json` or whose body the guard did not parse, and an append body that fails
validation in any way (422 shapes stay FastAPI's, and it authenticates first as always). An
exception no handler takes (other than `Exception`'s) propagates as from the application, to
`ServerErrorMiddleware` (500, raised again).

The routes are found in the application by method and path when the middleware is built (and
once by `create_app`), and their shapes are checked then: `RuntimeError` when a route changed
(another dependency, parameter or response class), so that the fast path is adapted with it.
OpenAPI is generated from the FastAPI routes, as before. A request answered here names its
route template in the scope for `memstream.api.request_metrics`.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI
from fastapi.datastructures import DefaultPlaceholder
from fastapi.dependencies.models import Dependant
from fastapi.routing import iter_route_contexts, serialize_response
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match
from starlette.types import ASGIApp, Receive, Scope, Send

from core.ids import ID
from memstream.api.request_guard import PARSED_BODY
from memstream.api.request_metrics import ROUTE
from memstream.api.security import ApiKeyBearer

PREFIX = "/v1/threads/"
APPEND = ("POST", "/v1/threads/{thread_id}/messages")
CONTEXT = ("GET", "/v1/threads/{thread_id}/context")
_JSON = "application/json"

Handler = Callable[[Request, Exception], Any]


@dataclass(frozen=True)
class HotRoute:
    """One route of the application as FastAPI runs it (its `RouteContext`: the route as included,
    with the router's prefix, dependencies and settings), the pieces of it the fast path runs."""

    route: Any
    """The `fastapi.routing.RouteContext` (its attributes are the effective route's)."""
    endpoint: Callable[..., Awaitable[Any]]
    auth: ApiKeyBearer
    body_field: Any
    """The body's `ModelField` (None without a body)."""
    status_code: int

    async def respond(self, values: dict[str, Any]) -> Response:
        """The endpoint's result for `values`, rendered as FastAPI renders its response model."""
        route = self.route
        result = await self.endpoint(**values)
        content = await serialize_response(
            field=route.response_field,
            response_content=result,
            include=route.response_model_include,
            exclude=route.response_model_exclude,
            by_alias=route.response_model_by_alias,
            exclude_unset=route.response_model_exclude_unset,
            exclude_defaults=route.response_model_exclude_defaults,
            exclude_none=route.response_model_exclude_none,
            dump_json=True,
        )
        return Response(content=content, media_type=_JSON, status_code=self.status_code)


def hot_route(api: FastAPI, method: str, path: str, *, body: str | None, query: tuple[str, ...]) -> HotRoute:
    """The route serving `method path` in `api` (the first that matches, as in the router),
    checked to have the shape the fast path runs: the path parameter `thread_id`, the `caller`
    dependency (an `ApiKeyBearer`) and nothing else to solve, the body parameter `body` when
    `body` names it (not embedded, no body size limit), exactly the query parameters `query`, and
    a response model rendered by the default response class. RuntimeError otherwise."""
    sample = {"type": "http", "method": method, "path": path.replace("{thread_id}", "t1"), "root_path": ""}
    for route in iter_route_contexts(api.routes):
        if route.matches(sample)[0] != Match.FULL:
            continue  # the router takes the first full match
        dependant = getattr(route, "dependant", None)
        if route.path != path or not isinstance(dependant, Dependant):
            break
        subs = dependant.dependencies
        auth = subs[0].call if len(subs) == 1 and subs[0].name == "caller" else None
        body_params = [p.name for p in dependant.body_params]
        shaped = (
            isinstance(auth, ApiKeyBearer)
            and not subs[0].dependencies
            and [p.name for p in dependant.path_params] == ["thread_id"]
            and [p.name for p in dependant.query_params] == list(query)
            and body_params == ([body] if body else [])
            and (body is None or route.body_field is dependant.body_params[0])
            and not (route._embed_body_fields or route.max_body_size is not None)
            and not (dependant.header_params or dependant.cookie_params or dependant.request_param_name)
            and not (route.is_sse_stream or route.is_json_stream)
            and route.response_field is not None
            and isinstance(route.response_class, DefaultPlaceholder)
            and inspect.iscoroutinefunction(dependant.call)
        )
        if shaped:
            assert isinstance(auth, ApiKeyBearer) and dependant.call is not None
            return HotRoute(route, dependant.call, auth, route.body_field, route.status_code or 200)
        break
    raise RuntimeError(f"the route {method} {path} is not the one memstream.api.fast_routes serves")


class FastRoutes:
    """ASGI middleware serving the ordinary appends and contexts itself (module doc); `api` is the
    application whose routes and exception handlers it runs."""

    def __init__(self, app: ASGIApp, api: FastAPI) -> None:
        self.app = app
        self.append = hot_route(api, *APPEND, body="body", query=())
        self.context = hot_route(api, *CONTEXT, body=None, query=("as_subagent", "at_offset"))
        self.handlers: dict[type[BaseException], Handler] = {
            kind: handler
            for kind, handler in api.exception_handlers.items()
            if isinstance(kind, type) and kind is not Exception
        }
        """As FastAPI hands them to `ExceptionMiddleware` (`Exception`'s goes to `ServerErrorMiddleware`)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not scope.get("query_string") and not scope.get("root_path"):
            path: str = scope["path"]
            if path.startswith(PREFIX):
                thread_id, slash, tail = path[len(PREFIX) :].partition("/")
                if slash and ID.matches(thread_id):
                    method = scope["method"]
                    if tail == "messages" and method == "POST":
                        if await self._append(scope, receive, send, thread_id):
                            return
                    elif tail == "context" and method == "GET":
                        scope[ROUTE] = CONTEXT[1]
                        values = {"thread_id": thread_id, "as_subagent": False, "at_offset": None}
                        await self._serve(self.context, values, scope, receive, send)
                        return
        await self.app(scope, receive, send)

    async def _append(self, scope: Scope, receive: Receive, send: Send, thread_id: str) -> bool:
        """Whether the append was answered here (False: the application answers it)."""
        parsed = scope.get(PARSED_BODY)
        if parsed is None or not _plain_json(scope):
            return False
        field = self.append.body_field
        assert field is not None
        try:
            body, errors = field.validate(parsed[1], {}, loc=("body",))
        except Exception:  # a validator raising other than ValueError: FastAPI decides what it means
            return False
        if errors:
            return False
        scope[ROUTE] = APPEND[1]
        await self._serve(self.append, {"thread_id": thread_id, "body": body}, scope, receive, send)
        return True

    async def _serve(
        self, hot: HotRoute, values: dict[str, Any], scope: Scope, receive: Receive, send: Send
    ) -> None:
        request = Request(scope, receive, send)
        try:
            values["caller"] = await hot.auth(request)
            response = await hot.respond(values)
        except Exception as exc:
            handler = self._handler(exc)
            if handler is None:
                raise
            response = handler(request, exc)
            if isinstance(response, Awaitable):
                response = await response
        await response(scope, receive, send)

    def _handler(self, exc: Exception) -> Handler | None:
        for kind in type(exc).__mro__:
            if kind in self.handlers:
                return self.handlers[kind]
        return None


def _plain_json(scope: Scope) -> bool:
    """Whether the request's first content type is `application/json` (with parameters or not),
    which FastAPI reads as JSON (it takes the first such header too)."""
    for name, value in scope["headers"]:
        if name.lower() == b"content-type":
            return bool(value.decode("latin-1").partition(";")[0].strip().lower() == _JSON)
    return False
