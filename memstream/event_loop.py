"""The node's event loop and HTTP parser: uvloop and httptools when they import, asyncio and h11 otherwise.

The node is CPU-bound on one event loop (README, Benchmarks): uvloop's loop (libuv, in C) and
uvicorn's httptools protocol (llhttp, in C; each response sent in one write,
`memstream.http_protocol`) cost a fraction of asyncio's pure-Python loop and
h11's parser per request. Both are dependencies; when either fails to import (a platform without
a wheel) the node runs on the standard ones and says so in one log line. Everything else the
node does is indifferent to the choice: signal handling (`memstream.shutdown.StopSignals` uses
Python-level handlers, which uvloop runs in the loop's thread), threads (`to_thread`,
`call_soon_threadsafe`), asyncpg, redis, aiokafka and faust all run on either loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any, Literal, TypeVar

log = logging.getLogger("memstream.node")

T = TypeVar("T")


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's `new_event_loop`, or None (asyncio's default loop) when uvloop does not import."""
    try:
        import uvloop
    except ImportError as exc:
        log.warning("uvloop unavailable (%s): running on asyncio's event loop", exc)
        return None
    return uvloop.new_event_loop


def run(main: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(main)` on the loop of `loop_factory()`."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(main)


def http_protocol() -> type[asyncio.Protocol] | Literal["h11"]:
    """uvicorn's `http` setting: httptools, each response in one write
    (`memstream.http_protocol.CoalescedHttpToolsProtocol`), or h11 when httptools does not import."""
    try:
        from memstream.http_protocol import CoalescedHttpToolsProtocol
    except ImportError as exc:
        log.warning("httptools unavailable (%s): parsing HTTP with h11", exc)
        return "h11"
    return CoalescedHttpToolsProtocol
