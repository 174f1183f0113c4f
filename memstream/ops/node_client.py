"""The CLI side of the node's admin API (`memstream.api.routes.admin`): plain HTTP with the admin token.

`NodeClient(base_url, token)`: `get(path)` answers the decoded JSON body; `stream(method, path)`
yields each `{"progress": ...}` line's progress as a `Progress` and returns the final `result`
(a generator's return value; `run_stream` wraps that). Failures are typed:
- `NodeUnreachable`: nothing answers at `base_url` (the message says how to start a node);
- `NodeRefused`: the node answered with an error (HTTP status, or an `error` line while streaming),
  carrying its `code`, `message` and, when known, `field`; code `node_silent` when the node sent
  nothing for `read_timeout_s` (a streaming node sends an empty line every 10 s while an operation
  is quiet, so silence means it is stuck or gone).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Generator
from typing import Any

import httpx

from core.errors import MemstreamError
from memstream.ops.progress import Progress


class NodeUnreachable(MemstreamError):
    code = "node_unreachable"


class NodeRefused(MemstreamError):
    def __init__(self, status: int | None, code: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.field = field


class NodeClient:
    """See the module doc."""

    def __init__(
        self, base_url: str, token: str, *, timeout_s: float = 30.0, read_timeout_s: float = 60.0
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.read_timeout_s = read_timeout_s
        self._client = httpx.Client(
            base_url=self.base_url,
            headers={"Authorization": f"Bearer {token}"},
            timeout=httpx.Timeout(timeout_s, read=read_timeout_s),  # streams send heartbeats (module doc)
        )

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> NodeClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        try:
            response = self._client.get(path, params=params)
        except httpx.ReadTimeout:
            raise self._silent(path) from None
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from None
        self._check(response)
        return response.json()

    def stream(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: dict[str, Any] | None = None,
        content: bytes | None = None,
        content_type: str = "application/x-ndjson",
        on_line: Callable[[str], None] | None = None,
    ) -> Generator[Progress, None, Any]:
        """Yield progress; return the `result` line's value (module doc). `content` is sent as
        the raw body (of `content_type`) instead of `body` as JSON; `on_line` gets the text of each
        `{"line": ...}` item (an account export's lines)."""
        sent: dict[str, Any] = (
            {"content": content, "headers": {"content-type": content_type}}
            if content is not None
            else {"json": body}
        )
        try:
            with self._client.stream(method, path, params=params, **sent) as response:
                if response.status_code >= 400:
                    response.read()
                    self._check(response)
                for line in response.iter_lines():
                    if not line.strip():
                        continue
                    item = json.loads(line)
                    if "line" in item and on_line is not None:
                        on_line(item["line"])
                    elif "progress" in item:
                        yield Progress(**item["progress"])
                    elif "result" in item:
                        return item["result"]
                    elif "error" in item:
                        error = item["error"]
                        raise NodeRefused(None, error.get("code", "error"), error.get("message", str(error)))
        except httpx.ReadTimeout:
            raise self._silent(path) from None
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from None
        raise NodeRefused(None, "incomplete", f"the node closed {path} without a result (did it stop?)")

    def _silent(self, path: str) -> NodeRefused:
        return NodeRefused(
            None,
            "node_silent",
            f"the node at {self.base_url} sent nothing for {self.read_timeout_s:g}s on {path}: it is stuck "
            "or overloaded (an operation may still be running in it; see its log)",
        )

    def _unreachable(self, exc: Exception) -> NodeUnreachable:
        return NodeUnreachable(
            f"no memstream node answers at {self.base_url} ({type(exc).__name__}: {exc}). Start one with "
            "`memstream up` (embedded stack) or `memstream node`, or point this command at it (--node URL, "
            "or the same --data-dir / MEMSTREAM_API_PORT as the node)."
        )

    @staticmethod
    def _check(response: httpx.Response) -> None:
        if response.status_code < 400:
            return
        try:
            error = response.json()["error"]
            raise NodeRefused(response.status_code, error["code"], error["message"], error.get("field"))
        except (ValueError, KeyError, TypeError):
            raise NodeRefused(
                response.status_code, "http_error", f"HTTP {response.status_code}: {response.text[:500]}"
            ) from None


def run_stream(stream: Generator[Progress, None, Any], on_progress: Callable[[Progress], None]) -> Any:
    """Drive `stream`, handing every progress to `on_progress`; returns the result."""
    while True:
        try:
            on_progress(next(stream))
        except StopIteration as stop:
            return stop.value
