"""`memstream.event_loop`: the node runs on uvloop and parses HTTP with httptools (both are
dependencies), and falls back to asyncio and h11 when they do not import."""

from __future__ import annotations

import asyncio
import builtins
import logging
import sys
from typing import Any

import pytest
import uvloop

from memstream import event_loop
from memstream.http_protocol import CoalescedHttpToolsProtocol


def test_the_node_loop_is_uvloop_and_runs_to_the_result() -> None:
    async def main() -> type[asyncio.AbstractEventLoop]:
        await asyncio.to_thread(lambda: None)  # worker threads hand results back to this loop
        return type(asyncio.get_running_loop())

    assert event_loop.run(main()) is uvloop.Loop
    assert event_loop.http_protocol() is CoalescedHttpToolsProtocol


def test_without_uvloop_or_httptools_the_node_runs_on_asyncio_and_h11(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    real_import = builtins.__import__

    def no_accelerators(name: str, *args: Any, **kwargs: Any) -> Any:
        if name in ("uvloop", "httptools"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_accelerators)
    monkeypatch.delitem(sys.modules, "uvloop")
    for module in ("httptools", "uvicorn.protocols.http.httptools_impl", "memstream.http_protocol"):
        monkeypatch.delitem(sys.modules, module, raising=False)

    async def main() -> type[asyncio.AbstractEventLoop]:
        return type(asyncio.get_running_loop())

    with caplog.at_level(logging.WARNING, logger="memstream.node"):
        loop_type = event_loop.run(main())
        protocol = event_loop.http_protocol()
    assert not issubclass(loop_type, uvloop.Loop)
    assert protocol == "h11"
    assert "uvloop unavailable" in caplog.text
    assert "httptools unavailable" in caplog.text
