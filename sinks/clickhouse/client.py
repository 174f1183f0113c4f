"""`ClickHouseClient`: one clickhouse-connect client on its own worker thread, for chdb and servers.

clickhouse-connect is synchronous. Every call runs on one dedicated worker thread so the event
loop never blocks: a client of a server has its own thread; every chdb client of the process
shares one thread (the engine is in-process: access is serialized, and while a client is open on
one data path no other path can be opened in the process). The connection is made on first use
(in that thread) and made again after a connection failure, so a client built while ClickHouse
is down starts working when it comes back.

Errors: connection failures and transient server errors (`is_transient`: timeouts, too many
parts, memory limit, ...) raise `TranscriptUnavailable`; other errors (a bug in a query, a schema
mismatch) propagate.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import clickhouse_connect
from clickhouse_connect.driver.client import Client
from clickhouse_connect.driver.exceptions import DatabaseError, OperationalError

from core.stores.transcripts import TranscriptUnavailable

log = logging.getLogger("memstream.clickhouse")

T = TypeVar("T")

# ClickHouse error codes that mean "try again later" rather than "this request is wrong"
_TRANSIENT_CODES = frozenset(
    {
        159,  # TIMEOUT_EXCEEDED
        164,  # READONLY
        202,  # TOO_MANY_SIMULTANEOUS_QUERIES
        203,  # NO_FREE_CONNECTION
        209,  # SOCKET_TIMEOUT
        210,  # NETWORK_ERROR
        241,  # MEMORY_LIMIT_EXCEEDED
        242,  # TABLE_IS_READ_ONLY
        252,  # TOO_MANY_PARTS
        285,  # TOO_FEW_LIVE_REPLICAS
        319,  # UNKNOWN_STATUS_OF_INSERT
        425,  # SYSTEM_ERROR
        999,  # KEEPER_EXCEPTION
    }
)
_CODE_RE = re.compile(r"Code: (\d+)\.")

_chdb_executor: ThreadPoolExecutor | None = None
_chdb_executor_lock = threading.Lock()


def _shared_chdb_executor() -> ThreadPoolExecutor:
    """The single thread every chdb client of this process runs its calls on."""
    global _chdb_executor
    with _chdb_executor_lock:
        if _chdb_executor is None:
            _chdb_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memstream-chdb")
        return _chdb_executor


def is_transient(exc: BaseException) -> bool:
    """True for a connection failure or a server error worth retrying later."""
    if isinstance(exc, OperationalError):
        return True
    if isinstance(exc, DatabaseError):
        match = _CODE_RE.search(str(exc))
        return match is not None and int(match.group(1)) in _TRANSIENT_CODES
    return isinstance(exc, (ConnectionError, TimeoutError))


class ClickHouseClient:
    """Runs calls on a client of `dsn` (`chdb:///DIR` or `http(s)://...`); see the module doc.

    Construction does no I/O. `close()` closes the client (it must not be used after).
    """

    def __init__(self, dsn: str, *, connect_timeout_s: float = 5.0, query_timeout_s: float = 60.0) -> None:
        if not dsn.startswith(("chdb://", "http://", "https://")):
            raise ValueError(
                f"unsupported ClickHouse DSN scheme in {dsn.split('://')[0]!r}: use chdb:///DIR or http(s)://"
            )
        self.dsn = dsn
        self.embedded = dsn.startswith("chdb://")
        self.connect_timeout_s = connect_timeout_s
        self.query_timeout_s = query_timeout_s
        self._client: Client | None = None
        self._closed = False
        self._executor = (
            _shared_chdb_executor()
            if self.embedded
            else ThreadPoolExecutor(max_workers=1, thread_name_prefix="memstream-clickhouse")
        )

    async def run(self, what: str, call: Callable[[Client], T]) -> T:
        """Run `call(client)` on the worker thread; transient failures -> TranscriptUnavailable
        (`what` names the operation in its message)."""
        if self._closed:
            raise RuntimeError("the transcript store is closed")

        def work() -> T:
            try:
                return call(self._connect())
            except Exception as exc:
                if is_transient(exc):
                    if isinstance(exc, OperationalError) and not self.embedded:
                        self._drop_client()
                    raise TranscriptUnavailable(f"ClickHouse {what} failed: {exc}") from exc
                raise

        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, work)

    async def close(self) -> None:
        """Close the client on its thread (idempotent); a server client's thread ends too."""
        if self._closed:
            return
        self._closed = True
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._drop_client)
        if not self.embedded:
            self._executor.shutdown(wait=True)

    def _connect(self) -> Client:
        if self._client is None:
            if self.embedded:
                path = self.dsn.removeprefix("chdb://")
                if not path:
                    raise ValueError(
                        "clickhouse DSN chdb:// needs a directory, e.g. chdb:///var/lib/memstream/ch"
                    )
                Path(path).mkdir(parents=True, exist_ok=True)
                self._client = clickhouse_connect.get_client(dsn=self.dsn)
            else:
                self._client = clickhouse_connect.get_client(
                    dsn=self.dsn,
                    connect_timeout=self.connect_timeout_s,
                    send_receive_timeout=self.query_timeout_s,
                    autogenerate_session_id=False,
                )
        return self._client

    def _drop_client(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            try:
                client.close()
            except Exception:  # closing a broken client: nothing left to do
                log.debug("closing a failed ClickHouse client", exc_info=True)
