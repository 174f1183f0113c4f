"""The OpenAI-compatible embedder against a small local `/v1/embeddings` server."""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from pydantic import SecretStr

from core.config import ModelSettings
from core.embeddings.errors import EmbeddingError
from sinks.embeddings.factory import build_embedder
from sinks.embeddings.minilm import OfflineMiniLM
from sinks.embeddings.openai_compat import OpenAIEmbedder

Reply = tuple[int, Any]  # (status, JSON body or raw bytes)


def vector(text: str, dims: int) -> list[float]:
    """A deterministic, non-normalised vector for `text`."""
    return [float((len(text) + i) % 7 + 1) for i in range(dims)]


@dataclass
class FakeServer:
    """Answers each POST with the next scripted reply (default: valid embeddings); records requests."""

    dims: int = 1536
    script: list[Callable[[dict[str, Any]], Reply]] = field(default_factory=list)
    requests: list[tuple[str, dict[str, str], dict[str, Any]]] = field(default_factory=list)
    url: str = ""

    def ok(self, body: dict[str, Any]) -> Reply:
        data = [
            {"object": "embedding", "index": i, "embedding": vector(t, self.dims)}
            for i, t in enumerate(body["input"])
        ]
        return 200, {
            "object": "list",
            "data": list(reversed(data)),
            "model": body["model"],
            "usage": {"prompt_tokens": 1, "total_tokens": 1},
        }


@pytest.fixture
def server() -> Iterator[FakeServer]:
    fake = FakeServer()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            fake.requests.append((self.path, {k.lower(): v for k, v in self.headers.items()}, body))
            status, reply = (fake.script.pop(0) if fake.script else fake.ok)(body)
            raw = reply if isinstance(reply, bytes) else json.dumps(reply).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.send_header("retry-after-ms", "10")  # keep the client's backoff short
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    fake.url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    try:
        yield fake
    finally:
        httpd.shutdown()
        httpd.server_close()


def embedder(server: FakeServer, **kwargs: Any) -> OpenAIEmbedder:
    options: dict[str, Any] = {
        "base_url": server.url,
        "api_key": "sk-test",
        "timeout_s": 5.0,
        "max_retries": 2,
    }
    return OpenAIEmbedder("text-embedding-3-small", **(options | kwargs))


async def test_request_shape_and_unit_vectors_in_input_order(server: FakeServer) -> None:
    model = embedder(server, batch_size=2)
    assert (model.model_id, model.dimensions) == ("text-embedding-3-small", 1536)
    vectors = await model.embed(["a", "bbb", "cc"])
    await model.close()
    assert len(server.requests) == 2  # batches of 2
    path, headers, body = server.requests[0]
    assert path == "/v1/embeddings"
    assert headers["authorization"] == "Bearer sk-test"
    assert body == {"model": "text-embedding-3-small", "input": ["a", "bbb"], "encoding_format": "float"}
    assert server.requests[1][2]["input"] == ["cc"]
    for text, got in zip(["a", "bbb", "cc"], vectors, strict=True):
        raw = vector(text, 1536)
        norm = math.sqrt(sum(x * x for x in raw))
        assert got == pytest.approx([x / norm for x in raw])


async def test_shortened_vectors_have_their_own_model_id_and_collection() -> None:
    from core.stores.vectors import CollectionRef
    from sinks.qdrant.layout import collection_name

    native = OpenAIEmbedder("text-embedding-3-small", api_key="k")
    short = OpenAIEmbedder("text-embedding-3-small", api_key="k", dimensions=512)
    same = OpenAIEmbedder("text-embedding-3-small", api_key="k", dimensions=1536)
    custom = OpenAIEmbedder("my-local-model", api_key="k", dimensions=768)
    try:
        assert (native.model_id, native.dimensions) == ("text-embedding-3-small", 1536)
        assert (short.model_id, short.dimensions) == ("text-embedding-3-small@512", 512)
        assert same.model_id == native.model_id
        assert custom.model_id == "my-local-model"
        refs = [
            CollectionRef(environment="test", account_id="acme", model_id=m.model_id) for m in (native, short)
        ]
        assert collection_name(refs[0]) != collection_name(refs[1])  # 1536 and 512 never share one
    finally:
        for model in (native, short, same, custom):
            await model.close()


@pytest.mark.parametrize("status", [429, 500, 503])
async def test_rate_limits_and_server_errors_are_retried(server: FakeServer, status: int) -> None:
    server.script = [lambda body: (status, {"error": {"message": "slow down", "type": "x"}})] * 2
    model = embedder(server)
    (got,) = await model.embed(["hello"])
    await model.close()
    assert len(server.requests) == 3 and len(got) == 1536


async def test_errors_after_the_retries_raise_embedding_error(server: FakeServer) -> None:
    server.script = [lambda body: (500, {"error": {"message": "down"}})] * 3
    model = embedder(server)
    with pytest.raises(EmbeddingError, match="failed"):
        await model.embed(["hello"])
    await model.close()
    assert len(server.requests) == 3  # 1 + max_retries


async def test_client_errors_are_not_retried(server: FakeServer) -> None:
    server.script = [lambda body: (401, {"error": {"message": "bad key"}})]
    model = embedder(server)
    with pytest.raises(EmbeddingError, match="bad key"):
        await model.embed(["hello"])
    await model.close()
    assert len(server.requests) == 1


def wrong_count(server: FakeServer) -> Callable[[dict[str, Any]], Reply]:
    def reply(body: dict[str, Any]) -> Reply:
        status, ok = server.ok(body)
        ok["data"] = ok["data"][:1]
        return status, ok

    return reply


@pytest.mark.parametrize(
    "reply",
    [
        lambda s: lambda body: (200, b"not json"),
        lambda s: lambda body: (200, {"object": "list", "data": "nope"}),
        wrong_count,
        lambda s: (
            lambda body: (
                200,
                {"data": [{"index": 0, "embedding": [1.0, 2.0]}], "model": "m", "object": "list"},
            )
        ),
        lambda s: (
            lambda body: (
                200,
                {"data": [{"index": 0, "embedding": ["x"] * 1536}], "model": "m", "object": "list"},
            )
        ),
        lambda s: (
            lambda body: (
                200,
                {"data": [{"index": 5, "embedding": [1.0] * 1536}], "model": "m", "object": "list"},
            )
        ),
        lambda s: (
            lambda body: (
                200,
                {"data": [{"index": 0, "embedding": [0.0] * 1536}], "model": "m", "object": "list"},
            )
        ),
    ],
    ids=[
        "not-json",
        "data-not-a-list",
        "wrong-count",
        "wrong-dimensions",
        "non-numeric",
        "bad-index",
        "zero",
    ],
)
async def test_malformed_responses_raise_embedding_error(
    server: FakeServer, reply: Callable[[FakeServer], Callable[[dict[str, Any]], Reply]]
) -> None:
    server.script = [reply(server)]
    model = embedder(server, max_retries=0)
    texts = ["a", "b"] if reply is wrong_count else ["a"]
    with pytest.raises(EmbeddingError):
        await model.embed(texts)
    await model.close()


async def test_an_unreachable_endpoint_raises_embedding_error() -> None:
    model = OpenAIEmbedder(base_url="http://127.0.0.1:9/v1", api_key="k", timeout_s=1.0, max_retries=0)
    with pytest.raises(EmbeddingError):
        await model.embed(["a"])
    await model.close()


def test_build_embedder_from_settings(server: FakeServer) -> None:
    for name, model_id in [
        ("offline", "all-MiniLM-L6-v2-q8"),
        ("all-MiniLM-L6-v2-q8", "all-MiniLM-L6-v2-q8"),
        ("all-MiniLM-L6-v2-int8", "all-MiniLM-L6-v2-int8"),
    ]:
        offline = build_embedder(ModelSettings(model=name))
        assert isinstance(offline, OfflineMiniLM) and offline.model_id == model_id
    assert build_embedder(ModelSettings()).model_id == "all-MiniLM-L6-v2-q8"
    refused = "runs all-MiniLM-L6-v2-q8 or all-MiniLM-L6-v2-int8, not 'bge-small'"
    with pytest.raises(ValueError, match=refused):
        build_embedder(ModelSettings(model="bge-small"))
    built = build_embedder(ModelSettings(provider="openai", base_url=server.url, api_key=SecretStr("k")))
    assert isinstance(built, OpenAIEmbedder) and built.model_id == "text-embedding-3-small"
    with pytest.raises(ValueError, match="unknown dimensions"):
        build_embedder(ModelSettings(provider="openai", model="mystery-embedder"))
