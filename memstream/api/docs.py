"""The API docs pages (`/docs`: Swagger UI, `/redoc`: ReDoc) served with their scripts and styles
from the installed package `fastapi-offline` (MIT; it ships Swagger UI, Apache-2.0, and ReDoc, MIT)
under `/docs/static`, instead of FastAPI's default pages, which load them from a CDN and stay blank
on a machine without internet access.

The pages and assets need no API key (they hold no data; the OpenAPI document at `/openapi.json`
neither). `install_docs(app)` expects an app created with `docs_url=None, redoc_url=None`.
"""

from __future__ import annotations

from pathlib import Path

import fastapi_offline
from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

DOCS_URL = "/docs"
REDOC_URL = "/redoc"
STATIC_URL = "/docs/static"
ASSETS = Path(fastapi_offline.__file__).parent / "static"
"""swagger-ui-bundle.js, swagger-ui.css, redoc.standalone.js, favicon.png."""


def install_docs(app: FastAPI) -> None:
    """Serve `/docs`, its OAuth2 redirect page, `/redoc` and their assets from `ASSETS`."""
    if app.docs_url is not None or app.redoc_url is not None:
        raise ValueError("install_docs needs an app created with docs_url=None and redoc_url=None")
    openapi_url = app.openapi_url or "/openapi.json"
    redirect_url = app.swagger_ui_oauth2_redirect_url or f"{DOCS_URL}/oauth2-redirect"
    app.mount(STATIC_URL, StaticFiles(directory=ASSETS), name="docs-static")

    @app.get(DOCS_URL, include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url,
            title=f"{app.title} - API docs",
            oauth2_redirect_url=redirect_url,
            swagger_js_url=f"{STATIC_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{STATIC_URL}/swagger-ui.css",
            swagger_favicon_url=f"{STATIC_URL}/favicon.png",
        )

    @app.get(redirect_url, include_in_schema=False)
    async def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get(REDOC_URL, include_in_schema=False)
    async def redoc() -> HTMLResponse:
        return get_redoc_html(
            openapi_url=openapi_url,
            title=f"{app.title} - API reference",
            redoc_js_url=f"{STATIC_URL}/redoc.standalone.js",
            redoc_favicon_url=f"{STATIC_URL}/favicon.png",
            with_google_fonts=False,
        )
