"""`SqlEndpoint` in the node: a port that cannot be bound is logged and never stops the node."""

from __future__ import annotations

import asyncio
import logging
import socket
from pathlib import Path

import pytest

from core.config import Settings
from core.sql.config import SqlSettings
from core.sql.service import SqlService
from memstream.sql.server import SqlEndpoint
from sinks.clickhouse.sql_chdb import ChdbSqlEngine
from tests.fakes.api_keys import InMemoryApiKeys


async def test_a_port_in_use_is_logged_and_the_endpoint_waits_for_the_stop(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    settings = Settings(data_dir=tmp_path, sql=SqlSettings(port=port))
    engine = ChdbSqlEngine(f"chdb://{tmp_path / 'ch'}", "memstream", workers=1)  # never used here
    endpoint = SqlEndpoint(settings, SqlService(engine, settings.sql, "dev"), InMemoryApiKeys())
    stop = asyncio.Event()
    caplog.set_level(logging.ERROR, "memstream.sql")
    running = asyncio.create_task(endpoint.run(stop))
    await asyncio.sleep(0.2)
    assert not running.done() and endpoint.port is None
    assert f"cannot listen on 127.0.0.1:{port}" in caplog.text and "MEMSTREAM_SQL__PORT" in caplog.text
    stop.set()
    await asyncio.wait_for(running, 5)
    taken.close()
    await engine.close()
