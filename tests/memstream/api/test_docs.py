"""`/docs` and `/redoc` work without internet access: every script, style and icon the pages load
comes from the node itself (`memstream.api.docs`), and needs no API key."""

from __future__ import annotations

import re

import httpx
import pytest

ASSET_RE = re.compile(r"""(?:src|href)\s*[=:]\s*['"]([^'"]+)['"]""")


def _assets(html: str) -> list[str]:
    return [url for url in ASSET_RE.findall(html) if not url.startswith("#")]


@pytest.mark.parametrize(
    ("page", "needed"),
    [
        ("/docs", {"swagger-ui-bundle.js", "swagger-ui.css", "favicon.png"}),
        ("/redoc", {"redoc.standalone.js", "favicon.png"}),
    ],
)
async def test_the_docs_pages_load_everything_from_the_node(
    client: httpx.AsyncClient, page: str, needed: set[str]
) -> None:
    response = await client.get(page)
    assert response.status_code == 200
    html = response.text
    assert "/openapi.json" in html
    assets = _assets(html)
    assert needed <= {url.rsplit("/", 1)[-1] for url in assets}, assets
    assert not [url for url in assets if "://" in url or url.startswith("//")], assets  # no CDN
    for url in assets:
        asset = await client.get(url)
        assert asset.status_code == 200, url
        assert len(asset.content) > 100, url
    script = next(url for url in assets if url.endswith(".js"))
    assert "javascript" in (await client.get(script)).headers["content-type"]


async def test_the_oauth2_redirect_page_and_the_spec_are_served(client: httpx.AsyncClient) -> None:
    assert (await client.get("/docs/oauth2-redirect")).status_code == 200
    spec = (await client.get("/openapi.json")).json()
    assert not {path for path in spec["paths"] if path.startswith(("/docs", "/redoc"))}
    assert (await client.get("/docs/static/missing.js")).status_code == 404
