"""`SqlEndpoint`: the SQL endpoint served on its own port (`Settings.sql`), in the node's process
and on its event loop.

Its own port rather than a path of the API: ClickHouse tools address a server's root (DBeaver's
JDBC URL takes the path as the database; older Grafana plugins have no path setting), so the
endpoint answers at `/` like ClickHouse's HTTP port (8123 by default, on 127.0.0.1). A port that
cannot be bound is logged as an error and the node runs on without the endpoint: appends and
contexts never depend on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Iterator

import uvicorn

from core.config import Settings
from core.sql.access import DataPrincipal, verify_data_key
from core.sql.errors import SqlError
from core.sql.service import SqlService
from core.stores.api_keys import ApiKeyStore
from memstream import event_loop
from memstream.api.access_log import log_config
from memstream.sql.http import SqlHttpApp

log = logging.getLogger("memstream.sql")

GRACEFUL_STOP_S = 2
"""How long a stopping node lets running queries finish before it closes their connections."""


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling (the node owns SIGINT/SIGTERM)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class SqlEndpoint:
    """See the module doc. `keys` authenticates (the node's cached API key store)."""

    def __init__(self, settings: Settings, service: SqlService, keys: ApiKeyStore) -> None:
        self.settings = settings
        self.service = service

        async def authenticate(key: str | None) -> DataPrincipal:
            return await verify_data_key(keys, key, settings.environment)

        self.app = SqlHttpApp(service, authenticate)
        self.port: int | None = None
        """The bound port once serving (the configured one, or the one picked for port 0)."""

    def _bind(self) -> socket.socket | None:
        sql = self.settings.sql
        family = socket.AF_INET6 if ":" in sql.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((sql.host, sql.port))
        except OSError as exc:
            sock.close()
            log.error(
                "the SQL endpoint cannot listen on %s:%d (%s): the node runs without it; set "
                "MEMSTREAM_SQL__PORT to a free port (or MEMSTREAM_SQL__ENABLED=false)",
                sql.host,
                sql.port,
                exc.strerror or exc,
            )
            return None
        sock.set_inheritable(True)
        return sock

    async def run(self, stop: asyncio.Event) -> None:
        """Serve until `stop` is set (a port that cannot be bound: wait for `stop`)."""
        sock = self._bind()
        if sock is None:
            await stop.wait()
            return
        try:
            with contextlib.suppress(SqlError):
                self.app.timezone = (await self.service.engine.text("SELECT timezone()")).strip() or "UTC"
            self.port = sock.getsockname()[1]
            config = uvicorn.Config(
                self.app,
                log_level="info",
                lifespan="off",
                loop="none",
                http=event_loop.http_protocol(),
                log_config=log_config(),
                access_log=False,
                timeout_graceful_shutdown=GRACEFUL_STOP_S,
            )
            server = _Server(config)
            serving = asyncio.create_task(server.serve(sockets=[sock]), name="sql-server")
            log.info(
                "SQL endpoint (ClickHouse HTTP interface, data-access keys) on http://%s:%d",
                self.settings.sql.host,
                self.port,
            )
            stopping = asyncio.create_task(stop.wait())
            await asyncio.wait({serving, stopping}, return_when=asyncio.FIRST_COMPLETED)
            server.should_exit = True
            if serving.done() and not stop.is_set():  # never stops the node: appends do not need it
                log.error("the SQL endpoint stopped (%r): the node runs on without it", serving.exception())
                await stop.wait()
            stopping.cancel()
            await asyncio.gather(serving, return_exceptions=True)
        finally:
            sock.close()
