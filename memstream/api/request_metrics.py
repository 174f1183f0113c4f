"""`RequestMetrics`: the outermost ASGI middleware of the API, observing every HTTP request's
duration in `core.metrics.HTTP_DURATION` by method, route template and status.

The route is the template the request was routed to (`/v1/threads/{thread_id}/messages`, never
the thread id itself: label values stay few): `FastRoutes` writes it to `ROUTE` for the requests it
answers, Starlette's router leaves the matched route in `scope["route"]` for the others; a request
no route took (404, a request refused before routing) is `unmatched`. The status is the one the
response started with; a request whose response never started (the application raised) is 500.
Cost: a clock read, a wrapped `send` and one observation per request.
"""

from __future__ import annotations

import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from core.metrics import HTTP_DURATION, child

ROUTE = "memstream.route"
"""The scope key where an inner layer that answers a request itself names its route template."""

UNMATCHED = "unmatched"


class RequestMetrics:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            route = scope.get(ROUTE) or getattr(scope.get("route"), "path", None) or UNMATCHED
            child(HTTP_DURATION, scope["method"], route, str(status)).observe(time.perf_counter() - started)
