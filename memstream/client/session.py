"""What the sync and the async client configure alike on their httpx client."""

from __future__ import annotations

from typing import Any

import memstream


def http_options(base_url: str, api_key: str, timeout: float) -> dict[str, Any]:
    """httpx client options: the base URL, the API key (always in the `Authorization` header, the
    only place the server accepts it), a user agent and the per-attempt timeout."""
    return {
        "base_url": base_url.rstrip("/"),
        "headers": {
            "Authorization": f"Bearer {api_key}",
            "User-Agent": f"memstream-client/{memstream.__version__}",
        },
        "timeout": timeout,
    }
