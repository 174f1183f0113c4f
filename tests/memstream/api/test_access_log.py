"""An API key sent in a URL never reaches a log line (issue 9, finding 17): a real uvicorn server
with the node's logging configuration, whose output is read back."""

from __future__ import annotations

import asyncio
import io
import logging
import logging.config
from collections.abc import Iterator
from urllib.parse import quote

import httpx
import pytest
import uvicorn
from fastapi import FastAPI

from memstream.api import access_log
from memstream.api.access_log import (
    REDACTED,
    FastAccessLog,
    RedactSecrets,
    fast_access_log,
    log_config,
    redact,
)
from memstream.embedded.process import free_port
from memstream.http_protocol import CoalescedHttpToolsProtocol

from .conftest import Keys

KEY = "msk_" + "A1b2" * 10 + "xyz"


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            'GET /v1/threads/t1?api_key=SECRET HTTP/1.1" 400',
            'GET /v1/threads/t1?api_key=[REDACTED] HTTP/1.1" 400',
        ),
        ("/x?after=1&Token=abc&limit=2", "/x?after=1&Token=[REDACTED]&limit=2"),
        ("/x?api%5Fkey=abc", "/x?api%5Fkey=[REDACTED]"),
        (f"/x?q={quote(KEY)}", "/x?q=[REDACTED]"),
        (f"/x?q={KEY}", "/x?q=[REDACTED]"),
        (f"/v1/threads/{KEY}/context", f"/v1/threads/msk_{REDACTED}/context"),
        (f"failed with Bearer {KEY}.", f"failed with Bearer msk_{REDACTED}."),
        ("/v1/threads/t1/messages?after=5&limit=10", "/v1/threads/t1/messages?after=5&limit=10"),
        ("msk_short is not a key", "msk_short is not a key"),
    ],
)
def test_redact(line: str, expected: str) -> None:
    assert redact(line) == expected


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """uvicorn applies the logging configuration process-wide: put the previous one back."""
    names = ["", "uvicorn", "uvicorn.error", "uvicorn.access"]
    saved = {name: (logging.getLogger(name).handlers[:], logging.getLogger(name).level) for name in names}
    try:
        yield
    finally:
        for name, (handlers, level) in saved.items():
            logger = logging.getLogger(name)
            logger.handlers[:] = handlers
            logger.setLevel(level)


@pytest.mark.usefixtures("restore_logging")
@pytest.mark.parametrize("protocol", ["httptools", CoalescedHttpToolsProtocol], ids=["uvicorn", "node"])
async def test_keys_in_urls_never_reach_the_log(
    app: FastAPI, keys: Keys, capfd: pytest.CaptureFixture[str], protocol: str | type
) -> None:
    """With uvicorn's own protocol (logging through `logging`) and the node's (`FastAccessLog`)."""
    key = keys.acme["Authorization"].removeprefix("Bearer ")
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host="127.0.0.1",
            port=port,
            log_level="info",
            lifespan="off",
            log_config=log_config(),
            http=protocol,
        )
    )
    serving = asyncio.create_task(server.serve())
    try:
        while not server.started:
            assert not serving.done(), "uvicorn did not start"
            await asyncio.sleep(0.02)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            refused = [
                await client.get("/v1/threads/t1", params={"api_key": key}),
                await client.get(f"/v1/threads/t1?api%5Fkey={quote(key)}"),
                await client.get("/v1/threads/t1/messages", params={"after": "-1", "x": key}),
                await client.get("/v1/threads/t1", params={"token": key}, headers=keys.acme),
            ]
            assert [r.status_code for r in refused] == [400, 400, 400, 400]
            in_path = await client.get(f"/v1/threads/{key}/context", headers=keys.acme)
            assert in_path.status_code == 404
            logging.getLogger("memstream.test").warning("the caller sent %s", key)
            try:
                raise ValueError(f"bad header Bearer {key}")
            except ValueError:
                logging.getLogger("memstream.test").exception("a request failed")
    finally:
        server.should_exit = True
        await serving
    out, err = capfd.readouterr()
    logged = out + err
    assert "GET /v1/threads/t1?api_key=[REDACTED] HTTP/1.1" in logged, logged
    assert "400" in logged and "404" in logged
    assert "the caller sent msk_[REDACTED]" in logged
    assert "ValueError: bad header Bearer msk_[REDACTED]" in logged
    assert key not in logged
    assert key.removeprefix("msk_")[:20] not in logged  # not even a part of it


def test_lines_that_cannot_hold_a_secret_skip_the_expressions(monkeypatch: pytest.MonkeyPatch) -> None:
    """Most access log lines have no query string: redacting them runs no regular expression."""
    monkeypatch.setattr(access_log, "_QUERY_PARAM", None)
    monkeypatch.setattr(access_log, "API_KEY_IN_TEXT", None)
    line = '127.0.0.1:50000 - "POST /v1/threads/t-1/messages HTTP/1.1" 201'
    assert redact(line) is line
    record = logging.LogRecord(
        "uvicorn.access",
        logging.INFO,
        __file__,
        1,
        '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:50000", "GET", "/v1/threads/t-1/context", "1.1", 200),
        None,
    )
    assert RedactSecrets().filter(record)
    assert record.getMessage() == '127.0.0.1:50000 - "GET /v1/threads/t-1/context HTTP/1.1" 200'


REQUESTS = [
    ("127.0.0.1:50000", "POST", "/v1/threads/t-1/messages", "1.1", 201),
    ("10.0.0.7:1234", "GET", f"/v1/threads/t1?api_key={KEY}&after=3", "1.1", 400),
    ("127.0.0.1:50001", "GET", f"/v1/threads/{KEY}/context", "1.0", 404),
    ("127.0.0.1:50002", "GET", "/x", "1.1", 599),  # no phrase
]


class Chunks(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.writes: list[str] = []

    def write(self, text: str) -> int:
        self.writes.append(text)
        return super().write(text)


@pytest.mark.usefixtures("restore_logging")
async def test_the_fast_log_writes_what_uvicorns_formatter_writes_in_one_write_per_turn() -> None:
    logging.config.dictConfig(log_config())
    logger = logging.getLogger("uvicorn.access")
    handler = logger.handlers[0]
    assert isinstance(handler, logging.StreamHandler)
    through_logging, fast_stream = Chunks(), Chunks()
    handler.setStream(through_logging)
    for args in REQUESTS:
        logger.info('%s - "%s %s HTTP/%s" %d', *args)
    loop = asyncio.get_running_loop()
    fast = FastAccessLog(logger, fast_stream, loop)
    for args in REQUESTS:
        fast.info('%s - "%s %s HTTP/%s" %d', *args)
    assert fast_stream.writes == []  # written on the next turn of the loop, all together
    await asyncio.sleep(0)
    assert fast_stream.writes == [through_logging.getvalue()]
    assert KEY not in fast_stream.getvalue() and "api_key=[REDACTED]" in fast_stream.getvalue()

    logger.setLevel(logging.WARNING)  # the logger's level is obeyed
    fast.info('%s - "%s %s HTTP/%s" %d', *REQUESTS[0])
    await asyncio.sleep(0)
    assert len(fast_stream.writes) == 1


@pytest.mark.usefixtures("restore_logging")
async def test_the_fast_log_is_shared_by_a_loop_and_used_only_with_the_nodes_configuration() -> None:
    logging.config.dictConfig(log_config())
    logger = logging.getLogger("uvicorn.access")
    loop = asyncio.get_running_loop()
    first = fast_access_log(logger, loop)
    assert first is not None and fast_access_log(logger, loop) is first

    formatter = logger.handlers[0].formatter
    assert formatter is not None
    formatter.use_colors = True  # type: ignore[attr-defined]
    assert fast_access_log(logger, loop) is None
    formatter.use_colors = False  # type: ignore[attr-defined]
    logger.addHandler(logging.NullHandler())
    assert fast_access_log(logger, loop) is None
    logger.handlers[:] = [logging.StreamHandler()]  # without the redacting filter
    assert fast_access_log(logger, loop) is None
