"""A small local HTTP server speaking enough of the OpenAI API for client tests.

`ChatServer` answers each POST with the next scripted `Reply` (or with `default(body)`), records
every request (path, lower-cased headers, JSON body) and can delay an answer (for timeouts).
`serve()` runs it on 127.0.0.1 in a thread; the `chat_server` fixture (conftest) wraps it.
Nothing in it is chat-specific except `chat_reply`, so other OpenAI-compatible clients can reuse it.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    status: int = 200
    body: Any = None  # JSON-encodable, or raw bytes sent as they are
    delay_s: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Request:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


def chat_reply(
    content: str | None,
    *,
    model: str = "test-model",
    usage: dict[str, int] | None = None,
    finish_reason: str = "stop",
) -> Reply:
    """A valid `/v1/chat/completions` answer with one choice; `usage=None` -> 11 prompt / 7 completion."""
    body: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": finish_reason,
            }
        ],
        "usage": usage
        if usage is not None
        else {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
    }
    return Reply(200, body)


def error_reply(status: int, message: str = "error", **headers: str) -> Reply:
    return Reply(status, {"error": {"message": message, "type": "test_error", "code": None}}, headers=headers)


@dataclass
class ChatServer:
    script: list[Reply] = field(default_factory=list)
    default: Callable[[dict[str, Any]], Reply] = field(default=lambda body: chat_reply("ok"))
    requests: list[Request] = field(default_factory=list)
    url: str = ""

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [r.body for r in self.requests]


@contextmanager
def serve(server: ChatServer) -> Iterator[ChatServer]:
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with lock:
                server.requests.append(
                    Request(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                )
                reply = server.script.pop(0) if server.script else server.default(body)
            if reply.delay_s:
                time.sleep(reply.delay_s)
            raw = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
            try:
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(raw)
            except (BrokenPipeError, ConnectionResetError):  # the client timed out and left
                pass

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    server.url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    try:
        yield server
    finally:
        httpd.shutdown()
        httpd.server_close()
