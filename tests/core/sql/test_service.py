"""`SqlService` on the real embedded engine: what a data-access key may read and run.

Tenancy is tried through every format and by adversarial SQL (subqueries, JOINs, UNION, CTEs,
table functions, system tables, comments, quoting, database prefixes, case); the security
refusals (files, network, processes, writes, settings, several statements) leave the data as it
was. The rows are `tests.sinks.clickhouse.sql_data`'s: `acme` may see its rows, never `globex`'s
nor another environment's.
"""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from core.sql.access import DataPrincipal
from core.sql.config import SqlSettings
from core.sql.errors import ACCESS_DENIED, NOT_IMPLEMENTED, READONLY, SqlError
from core.sql.service import SqlRequest, SqlService
from sinks.clickhouse.sql_chdb import ChdbSqlEngine
from sinks.clickhouse.store import ClickHouseTranscriptStore
from tests.sinks.clickhouse.sql_data import HIDDEN, SECRET, VISIBLE, fill

ACME = DataPrincipal("test", "key_acme", VISIBLE)
EVERY = DataPrincipal("test", "key_every", None)


@pytest.fixture
async def service(
    transcript_store: ClickHouseTranscriptStore, clickhouse_dsn: str
) -> AsyncIterator[SqlService]:
    await fill(transcript_store)
    engine = ChdbSqlEngine(clickhouse_dsn, transcript_store.database, workers=2)
    try:
        yield SqlService(engine, SqlSettings(), "test")
    finally:
        await engine.close()


async def run(service: SqlService, query: str, principal: DataPrincipal = ACME, **request: object) -> bytes:
    result = await service.run(principal, SqlRequest(query, **request))  # type: ignore[arg-type]
    return b"".join([chunk async for chunk in result.chunks])


async def refused(service: SqlService, query: str, code: int, **request: object) -> SqlError:
    with pytest.raises(SqlError) as caught:
        await run(service, query, **request)
    assert caught.value.code == code, caught.value.body()
    return caught.value


def lines(output: bytes) -> list[str]:
    return output.decode().splitlines()


async def test_an_account_key_reads_its_rows_of_every_table(service: SqlService) -> None:
    db = service.engine.database
    assert lines(await run(service, f"SELECT DISTINCT account_id, environment FROM {db}.messages")) == [
        "acme\ttest"
    ]
    assert await run(service, f"SELECT count() FROM {db}.messages_dedup") == b"3\n"
    assert await run(service, f"SELECT uniqExact(thread_id, offset) FROM {db}.messages") == b"3\n"
    assert await run(service, f"SELECT count() FROM {db}.message_vectors FINAL") == b"3\n"
    assert await run(service, f"SELECT count() FROM {db}.instance") == b"0\n"  # no tenancy columns: no rows
    every = await run(service, f"SELECT DISTINCT account_id FROM {db}.messages ORDER BY 1", EVERY)
    assert lines(every) == ["acme", "globex"]  # every account of the key's environment, never another's


@pytest.mark.parametrize(
    "fmt",
    [
        "TabSeparated",
        "TSVWithNamesAndTypes",
        "CSVWithNames",
        "JSONEachRow",
        "JSONCompactEachRowWithNames",
        "JSON",
        "XML",
        "Values",
        "PrettyCompact",
        "Native",
        "RowBinaryWithNamesAndTypes",
    ],
)
async def test_no_format_shows_another_accounts_rows(service: SqlService, fmt: str) -> None:
    db = service.engine.database
    output = await run(service, f"SELECT * FROM {db}.messages", default_format=fmt)
    assert VISIBLE.encode() in output and b"refund please" in output
    assert SECRET.encode() not in output and HIDDEN.encode() not in output
    assert SECRET.encode() in await run(service, f"SELECT * FROM {db}.messages", EVERY, default_format=fmt)


@pytest.mark.parametrize("fmt", ["Parquet", "Arrow", "ArrowStream"])
async def test_no_columnar_format_shows_another_accounts_rows(service: SqlService, fmt: str) -> None:
    output = await run(service, f"SELECT * FROM {service.engine.database}.messages_dedup", default_format=fmt)
    if fmt == "Parquet":
        table = pq.read_table(io.BytesIO(output))
    elif fmt == "Arrow":
        table = pa.ipc.open_file(io.BytesIO(output)).read_all()
    else:
        table = pa.ipc.open_stream(io.BytesIO(output)).read_all()
    columns = table.to_pydict()
    assert sorted(zip(columns["thread_id"], columns["offset"], strict=True)) == [
        ("th-a", 0),
        ("th-a", 1),
        ("th-b", 0),
    ]


ADVERSARIAL = [
    "SELECT account_id, content FROM {db}.messages WHERE account_id = 'globex'",
    "SELECT account_id, content FROM {db}.messages FINAL WHERE 1 OR account_id != 'acme'",
    "SELECT * FROM (SELECT * FROM (SELECT account_id, content FROM {db}.messages_dedup))",
    "SELECT m.content, d.user_id FROM {db}.messages AS m CROSS JOIN {db}.messages_dedup AS d",
    "SELECT content FROM {db}.messages UNION ALL SELECT thread_id FROM {db}.message_vectors",
    "SELECT user_id FROM {db}.messages INTERSECT SELECT user_id FROM {db}.messages",
    "WITH t AS (SELECT * FROM {db}.messages) SELECT content, user_id FROM t",
    "WITH messages AS (SELECT 1) SELECT content FROM {db}.messages",
    "SELECT content FROM {db}.messages WHERE thread_id IN (SELECT thread_id FROM {db}.messages_dedup)",
    "SELECT (SELECT groupArray(content) FROM {db}.messages), (SELECT groupArray(user_id) FROM {db}.messages)",
    "SELECT content FROM /* {db}.other */ {db}.messages -- comment",
    'SELECT content, user_id FROM "{db}"."messages"',
    "SELECT content, user_id FROM `{db}`.`messages_dedup` AS `x`",
    "SELECT content FROM view(SELECT * FROM {db}.messages)",
    "SELECT content, user_id FROM messages",
    "SELECT any(content), groupArray(thread_id) FROM {db}.messages GROUP BY account_id WITH TOTALS",
    "SELECT content FROM {db}.messages ARRAY JOIN [1, 2] AS n",
    "SELECT content FROM {db}.messages PREWHERE account_id != 'acme' OR 1",
    "SELECT user_id FROM {db}.messages LIMIT 1 BY account_id",
    "SELECT thread_id FROM {db}.message_vectors FINAL WHERE account_id IN ('globex', 'acme')",
    "SELECT name, create_table_query FROM system.tables",
    "SELECT table, name FROM system.columns",
]


@pytest.mark.parametrize("query", ADVERSARIAL)
async def test_adversarial_queries_see_only_the_accounts_rows(service: SqlService, query: str) -> None:
    sql = query.format(db=service.engine.database)
    output = await run(service, sql, database=service.engine.database)
    assert SECRET.encode() not in output and b"other env" not in output, output
    if "system." not in sql and "account_id = 'globex'" not in sql:  # the query reads what the key hides
        assert SECRET.encode() in await run(service, sql, EVERY, database=service.engine.database)


@pytest.mark.parametrize(
    ("query", "code"),
    [
        ("SELECT * FROM merge('{db}', 'messages')", ACCESS_DENIED),
        ("SELECT * FROM merge(REGEXP('.*'), '.*')", ACCESS_DENIED),
        ("SELECT * FROM cluster('default', {db}.messages)", ACCESS_DENIED),
        ("SELECT * FROM remote('127.0.0.1', {db}.messages)", ACCESS_DENIED),
        ("SELECT * FROM viewIfPermitted(SELECT * FROM {db}.messages ELSE null('a String'))", ACCESS_DENIED),
        ("SELECT * FROM loop({db}, messages) LIMIT 3", ACCESS_DENIED),
        ("SELECT * FROM mergeTreeIndex({db}, messages)", ACCESS_DENIED),
        ("SELECT * FROM system.parts", ACCESS_DENIED),
        ("SELECT * FROM system.query_log", ACCESS_DENIED),
        ("SELECT query FROM system.processes", ACCESS_DENIED),
        ("SELECT * FROM system.users", ACCESS_DENIED),
        ("SELECT * FROM information_schema.tables", ACCESS_DENIED),
        ("SELECT 1 WHERE 'x' IN system.processes", ACCESS_DENIED),
        ("SELECT * FROM default.anything", ACCESS_DENIED),
        ("SELECT * FROM `{db}.messages`", ACCESS_DENIED),
        ("SELECT content FROM {db}.messages SETTINGS additional_table_filters = {{}}", READONLY),
        ("SELECT content FROM {db}.messages SETTINGS readonly = 0", READONLY),
        ("SELECT 1 UNION ALL SELECT 2 SETTINGS max_execution_time = 0", READONLY),
        ("EXPLAIN SELECT * FROM {db}.messages", NOT_IMPLEMENTED),
    ],
)
async def test_reads_around_the_filters_are_refused(service: SqlService, query: str, code: int) -> None:
    await refused(service, query.format(db=service.engine.database), code)


async def test_unknown_spellings_of_the_database_find_nothing(service: SqlService) -> None:
    db = service.engine.database
    error = await refused(service, f"SELECT * FROM {db.upper()}.MESSAGES", ACCESS_DENIED)
    assert db in error.message
    await refused(service, "SELECT 1", 81, database="system")


@pytest.mark.parametrize(
    ("query", "code"),
    [
        ("SELECT file('/etc/hostname')", ACCESS_DENIED),
        ("SELECT * FROM file('/etc/hostname', 'LineAsString')", ACCESS_DENIED),
        ("SELECT * FROM url('http://127.0.0.1:9/', 'LineAsString')", ACCESS_DENIED),
        ("SELECT * FROM s3('http://127.0.0.1:9/b/k', 'LineAsString')", ACCESS_DENIED),
        ("SELECT * FROM executable('id', 'LineAsString', 'line String')", ACCESS_DENIED),
        ("SELECT * FROM input('a String')", ACCESS_DENIED),
        ("SELECT * FROM python('x')", ACCESS_DENIED),
        ("SELECT dictGet('d', 'a', 1)", ACCESS_DENIED),
        ("SELECT * FROM dictionary('d')", ACCESS_DENIED),
        ("SELECT joinGet('{db}.messages', 'content', 1)", ACCESS_DENIED),
        ("SELECT hasColumnInTable('{db}', 'messages', 'content')", ACCESS_DENIED),
        ("SELECT getServerSetting('tcp_port')", ACCESS_DENIED),
        ("SELECT aiGenerate('hello')", ACCESS_DENIED),
        ("SELECT logTrace('x')", ACCESS_DENIED),
        ("INSERT INTO {db}.messages (thread_id) VALUES ('x')", READONLY),
        ("INSERT INTO FUNCTION file('/tmp/x', 'CSV') SELECT 1", READONLY),
        ("CREATE TABLE {db}.x (a Int8) ENGINE = Memory", READONLY),
        ("DROP TABLE {db}.messages", READONLY),
        ("ALTER TABLE {db}.messages DELETE WHERE 1", READONLY),
        ("TRUNCATE TABLE {db}.messages", READONLY),
        ("OPTIMIZE TABLE {db}.messages FINAL", READONLY),
        ("SET readonly = 0", READONLY),
        ("SYSTEM FLUSH LOGS", READONLY),
        ("KILL QUERY WHERE 1", READONLY),
        ("SELECT 1; DROP TABLE {db}.messages", 62),
        ("SELECT 1; SELECT file('/etc/hostname')", 62),
    ],
)
async def test_what_reaches_outside_or_writes_is_refused(service: SqlService, query: str, code: int) -> None:
    db = service.engine.database
    await refused(service, query.format(db=db), code)
    assert await run(service, f"SELECT count() FROM {db}.messages", EVERY) == b"5\n"  # untouched


async def test_into_outfile_writes_no_file(service: SqlService, tmp_path: Path) -> None:
    target = tmp_path / "out.csv"
    await refused(
        service, f"SELECT * FROM {service.engine.database}.messages INTO OUTFILE '{target}'", READONLY
    )
    assert not target.exists()


async def test_describe_show_and_exists_stay_in_the_database(service: SqlService) -> None:
    db = service.engine.database
    described = lines(await run(service, f"DESCRIBE TABLE {db}.messages"))
    assert described[0].startswith("environment\tLowCardinality(String)")
    tables = lines(await run(service, "SHOW TABLES", database=db))
    assert {"messages", "messages_dedup", "message_vectors"} <= set(tables)
    assert await run(service, f"EXISTS TABLE {db}.messages") == b"1\n"
    assert lines(await run(service, "SHOW DATABASES")) == [db]
    await refused(service, "DESCRIBE TABLE system.processes", ACCESS_DENIED)
    await refused(service, "DESCRIBE (SELECT file('/etc/hostname'))", NOT_IMPLEMENTED)
    await refused(service, "SHOW TABLES FROM default", ACCESS_DENIED)


async def test_settings_a_client_passes(service: SqlService) -> None:
    db = service.engine.database
    output = await run(
        service,
        f"SELECT toUInt64(offset) AS o FROM {db}.messages_dedup ORDER BY thread_id, o LIMIT 1",
        settings={"output_format_json_quote_64bit_integers": "1", "max_execution_time": "5"},
        default_format="JSONEachRow",
    )
    assert json.loads(output) == {"o": "0"}
    error = await refused(service, "SELECT 1", READONLY, settings={"allow_introspection_functions": "1"})
    assert "Cannot modify 'allow_introspection_functions'" in error.message
    await refused(service, "SELECT 1", READONLY, settings={"readonly": "0"})
    limited = await refused(
        service, "SELECT number FROM numbers(200000)", 396, settings={"max_result_rows": "10"}
    )
    assert limited.status == 400


async def test_limits_stop_queries(transcript_store: ClickHouseTranscriptStore, clickhouse_dsn: str) -> None:
    engine = ChdbSqlEngine(clickhouse_dsn, transcript_store.database, workers=1)
    limits = SqlSettings(max_execution_time_s=1, max_memory_usage=50 * 1024**2, max_result_bytes=2 * 1024**2)
    service = SqlService(engine, limits, "test")
    try:
        timeout = await refused(service, "SELECT sum(cityHash64(number)) FROM numbers(100000000000)", 159)
        assert timeout.status == 408
        await refused(service, "SELECT groupArray(toString(number)) FROM numbers(20000000)", 241)
        await refused(service, "SELECT number, repeat('x', 100) FROM numbers(1000000)", 396)
        # a client may lower a limit, never raise it
        await refused(
            service,
            "SELECT sum(cityHash64(number)) FROM numbers(100000000000)",
            159,
            settings={"max_execution_time": "3600"},
        )
    finally:
        await engine.close()


async def test_queries_over_the_limit_wait_or_are_refused(
    transcript_store: ClickHouseTranscriptStore, clickhouse_dsn: str
) -> None:
    engine = ChdbSqlEngine(clickhouse_dsn, transcript_store.database, workers=1)
    service = SqlService(engine, SqlSettings(max_concurrent_queries=1, max_queued_queries=1), "test")
    try:
        first = await service.run(EVERY, SqlRequest("SELECT number FROM numbers(3)"))
        waiting = __import__("asyncio").create_task(run(service, "SELECT 42"))
        await __import__("asyncio").sleep(0.2)
        error = await refused(service, "SELECT 1", 202)  # one runs (its output not read yet), one waits
        assert error.status == 503
        assert b"".join([chunk async for chunk in first.chunks]) == b"0\n1\n2\n"
        assert await waiting == b"42\n"  # it ran once the slot was free
    finally:
        await engine.close()
