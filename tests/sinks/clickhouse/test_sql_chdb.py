"""`ChdbSqlEngine` on the session's chdb path: results of many blocks come out as one well-formed
output in every streamed format, empty results keep their header, settings are per query and
read-only cannot be lifted, and a consumer that stops early stops the query."""

from __future__ import annotations

import asyncio
import csv
import io
from collections.abc import AsyncIterator

import pyarrow.parquet as pq
import pytest

from core.sql.errors import SqlError
from core.sql.formats import OutputFormat, output_format
from sinks.clickhouse.sql_chdb import ChdbSqlEngine, escape_parameter
from sinks.clickhouse.store import ClickHouseTranscriptStore

ROWS = 200_000  # several blocks of the engine's 65,409 rows
MANY = f"SELECT number AS n, toString(number) AS s, 'a\"b,\nc' AS q FROM numbers({ROWS})"


@pytest.fixture
async def engine(
    transcript_store: ClickHouseTranscriptStore, clickhouse_dsn: str
) -> AsyncIterator[ChdbSqlEngine]:
    engine = ChdbSqlEngine(clickhouse_dsn, transcript_store.database, workers=2)
    try:
        yield engine
    finally:
        await engine.close()


def fmt(name: str) -> OutputFormat:
    found = output_format(name)
    assert found is not None
    return found


async def collect(
    engine: ChdbSqlEngine, sql: str, name: str, settings: dict[str, str] | None = None
) -> list[bytes]:
    return [chunk async for chunk in engine.stream(sql, fmt(name), settings or {"readonly": "1"}, {})]


async def test_a_parquet_result_of_many_blocks_is_one_file(engine: ChdbSqlEngine) -> None:
    chunks = await collect(engine, MANY, "Parquet")
    assert len(chunks) > 3  # streamed, not held whole
    table = pq.read_table(io.BytesIO(b"".join(chunks)))
    assert table.num_rows == ROWS and table.column_names == ["n", "s", "q"]
    assert table.column("n").to_pylist() == list(range(ROWS))
    assert pq.ParquetFile(io.BytesIO(b"".join(chunks))).num_row_groups > 1


@pytest.mark.parametrize(
    ("name", "header_rows"),
    [
        ("CSVWithNames", 1),
        ("CSVWithNamesAndTypes", 2),
        ("TSVWithNames", 1),
        ("TabSeparatedWithNamesAndTypes", 2),
    ],
)
async def test_headers_come_once(engine: ChdbSqlEngine, name: str, header_rows: int) -> None:
    output = b"".join(await collect(engine, MANY, name)).decode()
    if name.startswith("CSV"):
        records = list(csv.reader(io.StringIO(output)))
        assert records[0] == ["n", "s", "q"] and records[header_rows] == ["0", "0", 'a"b,\nc']
    else:
        records = [line.split("\t") for line in output.splitlines()]
        assert records[0] == ["n", "s", "q"] and records[header_rows] == ["0", "0", 'a"b,\\nc']
    assert len(records) == ROWS + header_rows
    assert [r[0] for r in records[header_rows:]] == [str(n) for n in range(ROWS)]


async def test_row_binary_with_names_and_types_has_one_header(engine: ChdbSqlEngine) -> None:
    output = b"".join(
        await collect(
            engine, f"SELECT toUInt32(number) AS n FROM numbers({ROWS})", "RowBinaryWithNamesAndTypes"
        )
    )
    header = b"\x01\x01n\x06UInt32"
    assert output.startswith(header) and output.count(header) == 1
    assert len(output) == len(header) + 4 * ROWS


async def test_empty_results_keep_their_header(engine: ChdbSqlEngine) -> None:
    assert b"".join(await collect(engine, "SELECT 1 AS a WHERE 0", "CSVWithNames")) == b'"a"\n'
    table = pq.read_table(io.BytesIO(b"".join(await collect(engine, "SELECT 1 AS a WHERE 0", "Parquet"))))
    assert table.num_rows == 0 and table.column_names == ["a"]
    assert await collect(engine, "SELECT 1 AS a WHERE 0", "TabSeparated") == []


async def test_settings_are_per_query_and_readonly_stays(engine: ChdbSqlEngine) -> None:
    limited = {"max_result_rows": "5", "result_overflow_mode": "throw", "readonly": "1"}
    with pytest.raises(SqlError) as caught:
        await collect(engine, "SELECT number FROM numbers(100)", "TSV", limited)
    assert caught.value.code == 396
    assert len(b"".join(await collect(engine, "SELECT number FROM numbers(100)", "TSV")).splitlines()) == 100
    with pytest.raises(SqlError) as caught:
        await collect(engine, "SELECT number FROM numbers(1) SETTINGS readonly = 0", "TSV")
    assert caught.value.code == 164
    assert await engine.text("SELECT getSetting('readonly')") == "1\n"


async def test_an_error_after_the_first_block_is_raised_after_it(engine: ChdbSqlEngine) -> None:
    sql = "SELECT number, throwIf(number = 3000) FROM numbers(4000) WHERE sleepEachRow(0.0005) = 0"
    chunks = []
    with pytest.raises(SqlError) as caught:
        async for chunk in engine.stream(sql + " SETTINGS max_block_size = 1000", fmt("TSV"), {}, {}):
            chunks.append(chunk)
    assert chunks and chunks[0].startswith(b"0\t0\n") and caught.value.code == 395


async def test_closing_the_output_early_stops_the_query(engine: ChdbSqlEngine) -> None:
    stream = engine.stream(
        "SELECT number, sleepEachRow(0.001) FROM numbers(100000000) SETTINGS max_block_size = 100",
        fmt("TSV"),
        {},
        {},
    )
    first = await anext(stream)  # type: ignore[call-overload]
    assert first.startswith(b"0\t0\n")
    await asyncio.wait_for(stream.aclose(), timeout=10)  # type: ignore[attr-defined]
    assert await engine.text("SELECT 7") == "7\n"  # the pool is free again


async def test_parameters_are_bound_not_spliced(engine: ChdbSqlEngine) -> None:
    value = "it's a \\ tab\there\nand a newline'); DROP TABLE x; --"
    assert escape_parameter("a\tb\\") == "a\\tb\\\\"
    assert await engine.text("SELECT {v:String}", {"v": value}) == value + "\n"
    output = b"".join(
        [c async for c in engine.stream("SELECT {v:String} AS v", fmt("JSONEachRow"), {}, {"v": value})]
    )
    assert __import__("json").loads(output) == {"v": value}
