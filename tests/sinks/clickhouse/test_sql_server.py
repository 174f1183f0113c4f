"""`ServerSqlEngine` over ClickHouse's HTTP interface. No ClickHouse server runs here (docs/notes.md),
so the server is the node's own SQL endpoint, which speaks that interface: statuses become
SqlErrors with the server's code, outputs stream through, and an error the server appends after
its output started is raised, not passed on as data."""

from __future__ import annotations

import pytest

from core.sql.errors import NETWORK_ERROR, SqlError
from core.sql.formats import output_format
from sinks.clickhouse.sql_server import ServerSqlEngine
from tests.memstream.sql.test_http import Endpoint, endpoint  # noqa: F401 (the fixture)


async def test_text_stream_and_errors_over_http(endpoint: Endpoint) -> None:  # noqa: F811
    engine = ServerSqlEngine(f"http://analyst:{endpoint.key}@127.0.0.1:{endpoint.port}", endpoint.database)
    csv, tsv = output_format("CSVWithNames"), output_format("TSV")
    assert csv is not None and tsv is not None
    try:
        assert await engine.text("SELECT {v:String}", {"v": "a b"}) == "a b\n"
        chunks = [c async for c in engine.stream("SELECT number AS n FROM numbers(3)", csv, {}, {})]
        assert b"".join(chunks) == b'"n"\n0\n1\n2\n'
        with pytest.raises(SqlError) as caught:
            await engine.text("SELECT file('/etc/hostname')")
        assert caught.value.code == 497
        failing = "SELECT number, throwIf(number = 3000) FROM numbers(4000) WHERE sleepEachRow(0.0005) = 0"
        received = []
        with pytest.raises(SqlError) as caught:
            async for chunk in engine.stream(failing, tsv, {"max_block_size": "1000"}, {}):
                received.append(chunk)
        assert caught.value.code == 395 and b"".join(received).startswith(b"0\t0\n")
        assert b"__exception__" not in b"".join(received)
    finally:
        await engine.close()
    down = ServerSqlEngine("http://u:p@127.0.0.1:9", "memstream")
    with pytest.raises(SqlError) as caught:
        await down.text("SELECT 1")
    assert caught.value.code == NETWORK_ERROR and caught.value.status == 503
    await down.close()
