"""`CoalescedHttpToolsProtocol`: each response leaves in one write, on a real uvicorn server too."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import uvicorn

from memstream.embedded.process import free_port
from memstream.http_protocol import CoalescedHttpToolsProtocol, CoalescedWrites

BODY = b'{"ok":true}'


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    assert scope["type"] == "http"
    await receive()
    await send(
        {
            "type": "http.response.start",
            "status": 201,
            "headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(BODY))],
        }
    )
    await send({"type": "http.response.body", "body": BODY})


class RecordingTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8080), "peername": ("127.0.0.1", 50000)}.get(name, default)

    def write(self, data: Any) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def test_a_response_is_one_write_of_status_line_headers_and_body() -> None:
    config = uvicorn.Config(app, http=CoalescedHttpToolsProtocol, lifespan="off", access_log=False)
    config.load()
    state = uvicorn.server.ServerState()
    protocol = CoalescedHttpToolsProtocol(config=config, server_state=state, app_state={})
    transport = RecordingTransport()
    protocol.connection_made(transport)
    for _ in range(3):  # keep-alive: one write per response
        protocol.data_received(b"POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\n{}")
        for _ in range(5):
            await asyncio.sleep(0)
    assert len(transport.writes) == 3
    for write in transport.writes:
        assert write.startswith(b"HTTP/1.1 201 Created\r\n")
        assert write.endswith(b"\r\n\r\n" + BODY)


async def test_close_sends_what_is_pending_first_and_nothing_goes_to_a_closing_transport() -> None:
    transport = RecordingTransport()
    writes = CoalescedWrites(transport, asyncio.get_running_loop())
    writes.write(b"HTTP/1.1 400 Bad Request\r\n\r\n")
    writes.close()
    assert transport.writes == [b"HTTP/1.1 400 Bad Request\r\n\r\n"]
    assert transport.closed
    writes.write(b"late")
    await asyncio.sleep(0)
    assert transport.writes == [b"HTTP/1.1 400 Bad Request\r\n\r\n"]


async def test_a_real_server_answers_every_request_of_a_connection() -> None:
    port = free_port()
    config = uvicorn.Config(app, port=port, http=CoalescedHttpToolsProtocol, lifespan="off", access_log=False)
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve())
    try:
        while not server.started:
            assert not serving.done(), "uvicorn did not start"
            await asyncio.sleep(0.02)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            for i in range(20):
                response = await client.post("/x", json={"i": i})
                assert (response.status_code, response.content) == (201, BODY)
            closing = await client.post("/x", json={}, headers={"Connection": "close"})
            assert (closing.status_code, closing.content) == (201, BODY)
    finally:
        server.should_exit = True
        await serving
