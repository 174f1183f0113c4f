"""`ServerSqlEngine`: the SQL endpoint's queries on a ClickHouse server (`http(s)://user:pw@host:port`),
over its HTTP interface with httpx, streamed as the server sends them.

Every query carries its settings as URL parameters (the limits, the row filters, `readonly = 1`:
the query itself can then change none of them) and the projection's database. An error the server
appends after its output started (tagged with `X-ClickHouse-Exception-Tag`) is raised as a
SqlError instead of being passed on as data.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from urllib.parse import unquote, urlsplit

import httpx

from core.sql.errors import NETWORK_ERROR, SqlError
from core.sql.exception_block import ExceptionScanner
from core.sql.formats import OutputFormat
from sinks.clickhouse.schema import check_identifier


class ServerSqlEngine:
    """See the module doc."""

    def __init__(
        self, dsn: str, database: str, *, connect_timeout_s: float = 5.0, read_timeout_s: float = 300.0
    ) -> None:
        url = urlsplit(dsn)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError("a ClickHouse server DSN looks like https://user:password@host:8443")
        port = url.port or (8443 if url.scheme == "https" else 8123)
        self.url = f"{url.scheme}://{url.hostname}:{port}/"
        self.database = check_identifier(database)
        auth = (unquote(url.username or "default"), unquote(url.password or ""))
        self._client = httpx.AsyncClient(
            auth=auth, timeout=httpx.Timeout(read_timeout_s, connect=connect_timeout_s)
        )

    async def text(self, sql: str, params: Mapping[str, str] | None = None) -> str:
        query = {"readonly": "1", "default_format": "TabSeparatedRaw"}
        query.update({f"param_{name}": value for name, value in (params or {}).items()})
        try:
            response = await self._client.post(self.url, params=query, content=sql.encode())
        except httpx.HTTPError as exc:
            raise SqlError(NETWORK_ERROR, f"ClickHouse at {self.url} is not reachable: {exc}") from None
        if response.status_code != 200:
            raise SqlError.from_engine(response.text)
        return response.text

    async def stream(
        self, sql: str, fmt: OutputFormat, settings: Mapping[str, str], params: Mapping[str, str]
    ) -> AsyncIterator[bytes]:
        query = {"database": self.database, "default_format": fmt.name}
        query.update({f"param_{name}": value for name, value in params.items()})
        query.update(settings)  # readonly = 1 comes last
        try:
            async with self._client.stream("POST", self.url, params=query, content=sql.encode()) as response:
                if response.status_code != 200:
                    raise SqlError.from_engine((await response.aread()).decode(errors="replace"))
                scanner = ExceptionScanner(response.headers.get("x-clickhouse-exception-tag"))
                async for chunk in response.aiter_bytes():
                    out = scanner.feed(chunk)
                    if out:
                        yield out
                rest = scanner.finish()
                if rest:
                    yield rest
        except httpx.HTTPError as exc:
            raise SqlError(NETWORK_ERROR, f"ClickHouse at {self.url} failed: {exc}") from None

    async def close(self) -> None:
        await self._client.aclose()
