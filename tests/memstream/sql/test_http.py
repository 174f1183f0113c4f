"""The SQL endpoint's HTTP interface on a real server (uvicorn), the real embedded engine and real
keys in Postgres: clickhouse-connect connects and queries as it would a ClickHouse server,
credentials the ClickHouse ways (and never in the URL, never an agent key), ClickHouse's error
shape, errors after the output started, `wait_end_of_query`."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import asyncpg
import clickhouse_connect
import httpx
import pytest
import uvicorn
from clickhouse_connect import common
from clickhouse_connect.driver.exceptions import DatabaseError

from core.auth import issue_key
from core.sql.access import DataPrincipal, issue_data_key, verify_data_key
from core.sql.config import SqlSettings
from core.sql.errors import SqlError
from core.sql.exception_block import ExceptionScanner
from core.sql.service import SqlService
from memstream.sql.http import SqlHttpApp
from sinks.clickhouse.sql_chdb import ChdbSqlEngine
from sinks.clickhouse.store import ClickHouseTranscriptStore
from sinks.postgres.api_keys import PostgresApiKeys
from tests.sinks.clickhouse.sql_data import SECRET, fill


@dataclass
class Endpoint:
    url: str
    port: int
    database: str
    key: str
    every_key: str
    agent_key: str

    def client(self, key: str | None = None, **kwargs: Any) -> Any:
        return clickhouse_connect.get_client(
            host="127.0.0.1", port=self.port, username="analyst", password=key or self.key, **kwargs
        )


@pytest.fixture
async def endpoint(
    transcript_store: ClickHouseTranscriptStore, clickhouse_dsn: str, pool: asyncpg.Pool
) -> AsyncIterator[Endpoint]:
    await fill(transcript_store)
    keys = PostgresApiKeys(pool)
    engine = ChdbSqlEngine(clickhouse_dsn, transcript_store.database, workers=2)

    async def authenticate(key: str | None) -> DataPrincipal:
        return await verify_data_key(keys, key, "test")

    app = SqlHttpApp(SqlService(engine, SqlSettings(), "test"), authenticate)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, lifespan="off", log_level="warning"))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    port = sock.getsockname()[1]
    try:
        for _ in range(500):
            if server.started:
                break
            await asyncio.sleep(0.02)
        yield Endpoint(
            url=f"http://127.0.0.1:{port}/",
            port=port,
            database=transcript_store.database,
            key=await issue_data_key(keys, "test", "acme"),
            every_key=await issue_data_key(keys, "test", None),
            agent_key=await issue_key(keys, "acme", "test"),
        )
    finally:
        server.should_exit = True
        await serving
        sock.close()
        await engine.close()


async def test_clickhouse_connect_queries_the_endpoint(endpoint: Endpoint) -> None:
    def work() -> tuple[Any, ...]:
        client = endpoint.client(database=endpoint.database)
        try:
            rows = client.query(
                "SELECT thread_id, offset, content FROM messages_dedup ORDER BY thread_id, offset"
            )
            table = client.query_arrow("SELECT account_id, count() AS n FROM messages GROUP BY account_id")
            every = endpoint.client(endpoint.every_key).query(
                f"SELECT DISTINCT account_id FROM {endpoint.database}.messages ORDER BY 1"
            )
            return client.server_version, rows.result_rows, table.to_pydict(), every.result_rows
        finally:
            client.close()

    version, rows, table, every = await asyncio.to_thread(work)
    assert version.startswith("26.")
    assert rows == [("th-a", 0, "refund please"), ("th-a", 1, "refund done"), ("th-b", 0, "hello there")]
    assert table == {"account_id": ["acme"], "n": [4]}  # 3 messages, one stored twice
    assert every == [("acme",), ("globex",)]


async def test_errors_come_in_clickhouses_shape(endpoint: Endpoint) -> None:
    def work() -> DatabaseError:
        client = endpoint.client()
        try:
            with pytest.raises(DatabaseError) as caught:
                client.query("SELECT file('/etc/hostname')")
            return caught.value
        finally:
            client.close()

    error = await asyncio.to_thread(work)
    assert "Code: 497" in str(error) and "function file() is not allowed" in str(error)
    async with httpx.AsyncClient() as http:
        response = await http.post(endpoint.url, content=b"SELEC 1", auth=("u", endpoint.key))
    assert response.status_code == 400
    assert response.headers["x-clickhouse-exception-code"] == "62"
    assert response.text.startswith("Code: 62. DB::Exception: Syntax error") and response.text.endswith(
        "(SYNTAX_ERROR)\n"
    )


async def test_credentials_the_clickhouse_ways_and_only_data_access_keys(endpoint: Endpoint) -> None:
    query = {"query": "SELECT count() FROM messages_dedup", "database": endpoint.database}
    async with httpx.AsyncClient() as http:
        basic = await http.get(endpoint.url, params=query, auth=("anyone", endpoint.key))
        headers = await http.post(
            endpoint.url, params=query, headers={"X-ClickHouse-User": "u", "X-ClickHouse-Key": endpoint.key}
        )
        bearer = await http.post(
            endpoint.url, params=query, headers={"Authorization": f"Bearer {endpoint.key}"}
        )
        assert [r.text for r in (basic, headers, bearer)] == ["3\n"] * 3
        missing = await http.post(endpoint.url, params=query)
        assert missing.status_code == 401 and missing.headers["x-clickhouse-exception-code"] == "194"
        agent = await http.post(endpoint.url, params=query, auth=("u", endpoint.agent_key))
        assert agent.status_code == 403 and "takes data-access keys only" in agent.text
        wrong = await http.post(endpoint.url, params=query, auth=("u", "msk_" + "C" * 43))
        assert wrong.status_code == 403 and wrong.headers["x-clickhouse-exception-code"] == "516"
        in_url = await http.post(endpoint.url, params={**query, "user": "u", "password": endpoint.key})
        assert in_url.status_code == 403 and "never accepted in the URL" in in_url.text
        assert (await http.get(endpoint.url + "ping")).text == "Ok."[:3] + "\n"
        assert (await http.get(endpoint.url)).text == "Ok.\n"


async def test_query_text_parameters_and_formats(endpoint: Endpoint) -> None:
    async with httpx.AsyncClient(auth=("u", endpoint.key)) as http:
        split = await http.post(
            endpoint.url,
            params={"query": "SELECT count()", "database": endpoint.database, "param_t": "th-a"},
            content=b"FROM messages_dedup WHERE thread_id = {t:String}",
        )
        assert split.text == "2\n"
        csv = await http.post(
            endpoint.url,
            params={"default_format": "CSVWithNames", "database": endpoint.database},
            content=b"SELECT thread_id, offset FROM messages_dedup ORDER BY 1, 2 LIMIT 1",
        )
        assert csv.text == '"thread_id","offset"\n"th-a",0\n'
        assert (
            csv.headers["content-type"].startswith("text/csv")
            and csv.headers["x-clickhouse-format"] == "CSVWithNames"
        )
        clause = await http.post(
            endpoint.url, content=b"SELECT 1 AS x FORMAT JSONEachRow", params={"default_format": "CSV"}
        )
        assert clause.text == '{"x":1}\n'
        other = await http.post(endpoint.url, content=b"SELECT 1", params={"database": "system"})
        assert other.status_code == 404 and "serves" in other.text
        unknown = await http.post(endpoint.url, content=b"SELECT 1 FORMAT Protobuf")
        assert unknown.status_code == 404 and unknown.headers["x-clickhouse-exception-code"] == "73"
        compressed = await http.post(endpoint.url, content=b"SELECT 1", params={"compress": "1"})
        assert compressed.status_code == 501 and "compress=false" in compressed.text
        setting = await http.post(endpoint.url, content=b"SELECT 1", params={"allow_ddl": "1"})
        assert setting.status_code == 403 and "Cannot modify 'allow_ddl'" in setting.text


async def test_an_error_after_the_output_started_is_tagged(endpoint: Endpoint) -> None:
    sql = b"SELECT number, throwIf(number = 3000) FROM numbers(4000) WHERE sleepEachRow(0.0005) = 0"
    async with httpx.AsyncClient(auth=("u", endpoint.key)) as http:
        streamed = await http.post(endpoint.url, content=sql, params={"max_block_size": "1000"})
        held = await http.post(endpoint.url, content=sql, params={"wait_end_of_query": "1"})
    assert streamed.status_code == 200 and streamed.text.startswith("0\t0\n")
    scanner = ExceptionScanner(streamed.headers["x-clickhouse-exception-tag"])
    assert scanner.feed(streamed.content).startswith(b"0\t0\n")
    with pytest.raises(SqlError) as caught:
        scanner.finish()
    assert caught.value.code == 395
    assert held.status_code == 500 and held.text.startswith("Code: 395.")  # held whole: a real status

    def with_clickhouse_connect() -> str:
        # the endpoint reports every setting read-only (readonly = 1); clickhouse-connect sends the
        # ones the endpoint accepts when told to
        common.set_setting("invalid_setting_action", "send")
        client = endpoint.client()
        try:
            with pytest.raises(Exception) as caught:
                client.query(sql.decode(), settings={"max_block_size": 1000})
            return str(caught.value)
        finally:
            client.close()
            common.set_setting("invalid_setting_action", "error")

    assert "395" in await asyncio.to_thread(with_clickhouse_connect)


async def test_no_format_of_the_http_interface_leaks_another_account(endpoint: Endpoint) -> None:
    async with httpx.AsyncClient(auth=("u", endpoint.key)) as http:
        for fmt in (
            "TabSeparated",
            "CSVWithNames",
            "JSONEachRow",
            "JSON",
            "Native",
            "RowBinaryWithNamesAndTypes",
        ):
            response = await http.post(
                endpoint.url,
                params={"default_format": fmt, "database": endpoint.database},
                content=b"SELECT * FROM messages",
            )
            assert response.status_code == 200 and b"acme" in response.content
            assert SECRET.encode() not in response.content
