"""The memory console: a web page the node serves at `/console` (README, "Memory console").

Plain HTML, CSS and JavaScript shipped in this package (`static/`; no build step, nothing loaded
from elsewhere). The page holds no data of its own: it calls the node's REST API with the API key
the person types in (kept in the tab's `sessionStorage` only), so it sees exactly what that key's
account may see, and the operators' view calls `/admin/v1/overview` with the admin token. Every
value is put into the page as text, never as markup. The files are served with a Content Security
Policy that allows scripts, styles and requests to this origin only.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from starlette.staticfiles import StaticFiles
from starlette.types import Message, Receive, Scope, Send

CONSOLE_URL = "/console"
STATIC = Path(__file__).parent / "static"
SECURITY_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        b"connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-cache"),
]


class _ConsoleFiles:
    """`StaticFiles` of the console (index.html for `/console/`) with `SECURITY_HEADERS` added."""

    def __init__(self) -> None:
        self._files = StaticFiles(directory=STATIC, html=True)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS]
            await send(message)

        await self._files(scope, receive, secured)


def install_console(app: FastAPI) -> None:
    """Serve the console at `/console/` (`/console` redirects there)."""
    app.mount(CONSOLE_URL, _ConsoleFiles(), name="console")
