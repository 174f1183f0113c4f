"""`SqlHttpApp`: the part of ClickHouse's HTTP interface that clickhouse-connect, `clickhouse client`
over HTTP, curl, DBeaver and Grafana use, as an ASGI app over `core.sql.service.SqlService`.

- `GET /ping` and `GET /` without a query: `Ok.` (health checks).
- The query: the `query` URL parameter and/or the request body (POST; the body follows the
  parameter, as in ClickHouse), gzip or deflate bodies accepted; GET works too.
- URL parameters: `database` (only the projection's), `default_format`, `param_NAME` (query
  parameters), settings (`core.sql.limits`: limits lowered only, output settings), and
  ClickHouse's transport parameters (`session_id`, `query_id`, ...; accepted, without effect:
  every request stands alone; `compress=1`, ClickHouse's own compressed transfer, is refused with
  a message saying to turn it off). `wait_end_of_query=1` holds the output (up to
  `max_buffered_result_bytes`) so that an error still gets its status.
- Credentials: a data-access key as the password of HTTP Basic auth (any user name), as the header
  `X-ClickHouse-Key` (with `X-ClickHouse-User`), or `Authorization: Bearer`. Never in the URL
  (URLs are logged): a `password` parameter is refused.
- Answers: the format's content type with `X-ClickHouse-Format`, `X-ClickHouse-Query-Id`,
  `X-ClickHouse-Timezone`. Errors: ClickHouse's status, body `Code: N. DB::Exception: ... (NAME)`
  and header `X-ClickHouse-Exception-Code`. An error after the output started is appended the way
  ClickHouse 25.11+ does (`__exception__` block tagged with `X-ClickHouse-Exception-Tag`), which
  clickhouse-connect and `memstream sql` raise.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import gzip
import logging
import secrets
import time
import uuid
import zlib
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qsl

from core.errors import Unauthorized
from core.sql.access import DataPrincipal
from core.sql.errors import (
    AUTHENTICATION_FAILED,
    QUERY_IS_TOO_LARGE,
    REQUIRED_PASSWORD,
    SqlError,
)
from core.sql.exception_block import write as exception_block
from core.sql.limits import TRANSPORT_PARAMETERS
from core.sql.service import SqlRequest, SqlService

log = logging.getLogger("memstream.sql")

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
Authenticate = Callable[[str | None], Awaitable[DataPrincipal]]

_BAD_REQUEST_CODE = 36  # BAD_ARGUMENTS


def _credentials(headers: dict[str, str]) -> str | None:
    key = headers.get("x-clickhouse-key")
    if key:
        return key
    authorization = headers.get("authorization", "")
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() == "bearer":
        return value.strip() or None
    if scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(value.strip(), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            raise SqlError(AUTHENTICATION_FAILED, "malformed Basic credentials") from None
        return decoded.partition(":")[2] or None
    return None


def _decode_body(body: bytes, encoding: str) -> bytes:
    if encoding in ("", "identity"):
        return body
    try:
        if encoding == "gzip":
            return gzip.decompress(body)
        if encoding == "deflate":
            return zlib.decompress(body)
    except (OSError, zlib.error) as exc:
        raise SqlError(_BAD_REQUEST_CODE, f"the request body is not valid {encoding}: {exc}") from None
    raise SqlError(
        _BAD_REQUEST_CODE,
        f"request Content-Encoding {encoding!r} is not supported: send gzip, deflate or none",
    )


class SqlHttpApp:
    """See the module doc. `timezone` is the engine's (`X-ClickHouse-Timezone`)."""

    def __init__(self, service: SqlService, authenticate: Authenticate, *, timezone: str = "UTC") -> None:
        self.service = service
        self.authenticate = authenticate
        self.timezone = timezone

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        started = time.monotonic()
        query_id = str(uuid.uuid4())
        headers = {
            name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope["headers"]
        }
        params = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True))
        query_id = params.get("query_id") or query_id
        path, method = scope["path"], scope["method"]
        try:
            if method not in ("GET", "POST"):
                raise SqlError(_BAD_REQUEST_CODE, f"HTTP method {method} is not served: use GET or POST")
            body = await self._body(receive, headers)
            if path == "/ping" or (path == "/" and "query" not in params and not body):
                await self._respond(send, 200, b"Ok.\n", "text/html; charset=UTF-8", query_id)
                return
            if path != "/":
                raise SqlError(
                    _BAD_REQUEST_CODE,
                    f"no handler for {path}: send queries to / (ClickHouse's HTTP interface)",
                )
            if "password" in params:
                raise SqlError(
                    AUTHENTICATION_FAILED,
                    "credentials are never accepted in the URL (URLs are logged): send the data-access key "
                    "as the Basic auth password or the X-ClickHouse-Key header",
                )
            if params.get("compress") == "1" or params.get("decompress") == "1":
                raise SqlError(
                    48,
                    "ClickHouse's compressed transfer (compress=1 / decompress=1) is not supported: turn the "
                    "client's compression off (DBeaver / JDBC: driver property compress=false)",
                )
            principal = await self._principal(headers)
            request = self._request(params, body)
            result = await self.service.run(principal, request)
        except SqlError as error:
            await self._error(send, error, query_id)
            log.info(
                "sql %s %s -> %d code %d (%.0f ms)", method, path, error.status, error.code, _ms(started)
            )
            return
        except Exception:  # a bug, not the query's fault: answered in ClickHouse's shape all the same
            log.exception("the SQL endpoint failed on a query")
            failure = SqlError(1001, "the SQL endpoint failed: see the node's log", name="STD_EXCEPTION")
            await self._error(send, failure, query_id)
            return
        response_headers = [
            (b"content-type", result.format.content_type.encode()),
            (b"x-clickhouse-format", result.format.name.encode()),
            (b"x-clickhouse-query-id", query_id.encode()),
            (b"x-clickhouse-timezone", self.timezone.encode()),
            (b"x-clickhouse-server-display-name", b"memstream"),
        ]
        tag = secrets.token_hex(8)
        response_headers.append((b"x-clickhouse-exception-tag", tag.encode()))
        sent = 0
        failed: SqlError | None = None
        if params.get("wait_end_of_query") == "1":
            held: list[bytes] = []
            try:
                async for chunk in result.chunks:
                    held.append(chunk)
            except SqlError as error:
                await self._error(send, error, query_id)
                log.info(
                    "sql %s -> %d code %d (%.0f ms)", principal.key_id, error.status, error.code, _ms(started)
                )
                return
            await send({"type": "http.response.start", "status": 200, "headers": response_headers})
            for chunk in held:
                sent += len(chunk)
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        else:
            await send({"type": "http.response.start", "status": 200, "headers": response_headers})
            gone = asyncio.create_task(_disconnected(receive))
            try:
                async for chunk in result.chunks:
                    if gone.done():  # the client went away: stop the query
                        failed = SqlError(394, "the client closed the connection", name="QUERY_WAS_CANCELLED")
                        break
                    sent += len(chunk)
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
            except SqlError as error:
                failed = error
                await send(
                    {"type": "http.response.body", "body": exception_block(tag, error), "more_body": True}
                )
            finally:
                gone.cancel()
                await result.chunks.aclose()  # type: ignore[attr-defined]
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        outcome = f"failed code {failed.code}" if failed else "200"
        log.info(
            "sql %s (%s) %s: %d bytes %s (%.0f ms)",
            principal.key_id,
            principal.scope,
            result.format.name,
            sent,
            outcome,
            _ms(started),
        )

    async def _body(self, receive: Receive, headers: dict[str, str]) -> bytes:
        limit = self.service.limits.max_query_bytes * 4 + 1024
        parts: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise SqlError(QUERY_IS_TOO_LARGE, f"the request body is over {limit} bytes")
            parts.append(chunk)
            if not message.get("more_body", False):
                break
        body = _decode_body(b"".join(parts), headers.get("content-encoding", "").lower())
        if headers.get("content-type", "").startswith("multipart/form-data"):
            raise SqlError(48, "external tables (multipart/form-data) are not supported")
        return body

    async def _principal(self, headers: dict[str, str]) -> DataPrincipal:
        key = _credentials(headers)
        try:
            return await self.authenticate(key)
        except Unauthorized as exc:
            raise SqlError(REQUIRED_PASSWORD if key is None else AUTHENTICATION_FAILED, exc.message) from None

    @staticmethod
    def _request(params: dict[str, str], body: bytes) -> SqlRequest:
        try:
            text = body.decode()
        except UnicodeDecodeError:
            raise SqlError(_BAD_REQUEST_CODE, "the query is not valid UTF-8") from None
        query = params.get("query", "")
        query = f"{query}\n{text}" if query and text else (query or text)
        settings: dict[str, str] = {}
        query_params: dict[str, str] = {}
        for name, value in params.items():
            if name.startswith("param_"):
                query_params[name.removeprefix("param_")] = value
            elif name not in TRANSPORT_PARAMETERS:
                settings[name] = value
        return SqlRequest(
            query=query,
            database=params.get("database"),
            default_format=params.get("default_format"),
            settings=settings,
            params=query_params,
        )

    @staticmethod
    async def _respond(
        send: Send,
        status: int,
        body: bytes,
        content_type: str,
        query_id: str,
        extra: list[tuple[bytes, bytes]] | None = None,
    ) -> None:
        headers = [
            (b"content-type", content_type.encode()),
            (b"x-clickhouse-query-id", query_id.encode()),
            *(extra or []),
        ]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})

    async def _error(self, send: Send, error: SqlError, query_id: str) -> None:
        extra = [(b"x-clickhouse-exception-code", str(error.code).encode())]
        if error.status == 503:
            extra.append((b"retry-after", b"1"))
        if error.status == 401:
            extra.append((b"www-authenticate", b'Basic realm="memstream SQL"'))
        await self._respond(
            send, error.status, error.body().encode(), "text/plain; charset=UTF-8", query_id, extra
        )


async def _disconnected(receive: Receive) -> None:
    """Returns when the client disconnected (the request body was read before)."""
    while (await receive())["type"] != "http.disconnect":
        pass


def _ms(started: float) -> float:
    return (time.monotonic() - started) * 1000
