"""`CoalescedHttpToolsProtocol`: uvicorn's httptools protocol sending each response in one write.

uvicorn writes a response's status line and headers when the application sends
`http.response.start`, and its body when it sends `http.response.body`: two `transport.write`
calls, and both asyncio's and uvloop's transports send at once when their buffer is empty - two
`send` system calls and, with TCP_NODELAY, two TCP segments for every small JSON answer. Here the
protocol's transport is a `CoalescedWrites`: writes made during one turn of the event loop are
joined and handed to the real transport once, from a callback scheduled with the first of them
(the next turn, before the loop waits for I/O). `close()` sends what is pending first; nothing
else changes (reading, flow control and the rest go to the real transport).

Requests are logged through `memstream.api.access_log.FastAccessLog` when the access log is on
with the node's logging configuration: the same lines, written once per turn too.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from memstream.api.access_log import fast_access_log


class CoalescedWrites:
    """A transport that joins the writes of one event-loop turn into one write of `transport`."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        if not self._pending:
            self._loop.call_soon(self.flush)
        self._pending.append(bytes(data))

    def flush(self) -> None:
        """Hand what is pending to the real transport (dropped when it is closing: the peer left)."""
        if not self._pending:
            return
        data = self._pending[0] if len(self._pending) == 1 else b"".join(self._pending)
        self._pending.clear()
        if not self._transport.is_closing():
            self._transport.write(data)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class CoalescedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's `HttpToolsProtocol` writing through `CoalescedWrites` (module doc)."""

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        if self.access_log:
            fast = fast_access_log(self.access_logger, self.loop)
            if fast is not None:
                self.access_logger = fast  # type: ignore[assignment]  # duck-typed: `info` is all it uses

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(CoalescedWrites(transport, self.loop))  # type: ignore[arg-type]
