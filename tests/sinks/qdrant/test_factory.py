"""build_index hands the configured API key to the Qdrant server on every request."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from core.config import Settings
from core.embeddings.base import SparseVector
from core.stores.vectors import CollectionRef, IndexFilter, IndexUnavailable
from sinks.qdrant.factory import build_index


@pytest.fixture
def recording_server() -> Iterator[tuple[str, list[dict[str, str]]]]:
    seen: list[dict[str, str]] = []

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            seen.append({k.lower(): v for k, v in self.headers.items()})
            self.send_response(403)
            self.send_header("content-type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"status": {"error": "forbidden"}}')

        do_GET = do_POST = do_PUT = _answer

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()


@pytest.mark.filterwarnings("ignore:Api key is used with an insecure connection")
async def test_the_api_key_reaches_the_server(recording_server: tuple[str, list[dict[str, str]]]) -> None:
    url, seen = recording_server
    index = build_index(Settings(qdrant_url=url, qdrant_api_key="s3cret-key"))
    try:
        with pytest.raises(IndexUnavailable):
            await index.hybrid_query(
                CollectionRef(environment="dev", account_id="a", model_id="m"),
                [0.0] * 4,
                SparseVector(indices=(1,), values=(1.0,)),
                IndexFilter(agent_id="bot", user_id=None),
                5,
            )
    finally:
        await index.close()
    assert seen, "the index never called the server"
    assert all(headers.get("api-key") == "s3cret-key" for headers in seen)
