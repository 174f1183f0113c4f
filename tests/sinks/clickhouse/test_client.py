"""The ClickHouse client: which failures are transient (an outage), and how calls report them."""

from __future__ import annotations

import threading

import pytest
from clickhouse_connect.driver.client import Client
from clickhouse_connect.driver.exceptions import DatabaseError, OperationalError

from core.stores.transcripts import TranscriptUnavailable
from sinks.clickhouse.client import ClickHouseClient, is_transient


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (OperationalError("connection refused"), True),
        (DatabaseError("Code: 252. DB::Exception: Too many parts (300)"), True),
        (DatabaseError("Code: 241. DB::Exception: Memory limit exceeded"), True),
        (DatabaseError("Code: 159. DB::Exception: Timeout exceeded"), True),
        (DatabaseError("Code: 62. DB::Exception: Syntax error"), False),
        (DatabaseError("Code: 60. DB::Exception: Table x doesn't exist"), False),
        (DatabaseError("no code at all"), False),
        (ConnectionResetError("reset by peer"), True),
        (TimeoutError(), True),
        (ValueError("a bug"), False),
    ],
)
def test_transient_failures_are_connection_errors_and_retryable_server_codes(
    error: BaseException, transient: bool
) -> None:
    assert is_transient(error) is transient


async def test_a_transient_failure_is_unavailable_and_any_other_propagates(clickhouse_dsn: str) -> None:
    client = ClickHouseClient(clickhouse_dsn)
    try:

        def overloaded(_: Client) -> None:
            raise DatabaseError("Code: 252. DB::Exception: Too many parts")

        with pytest.raises(TranscriptUnavailable, match="ClickHouse insert failed: Code: 252") as raised:
            await client.run("insert", overloaded)
        assert isinstance(raised.value.__cause__, DatabaseError)
        with pytest.raises(DatabaseError, match="Code: 62"):  # a bad query is a bug, not an outage
            await client.run("query", lambda c: c.query("SELEC 1"))
        assert await client.run("query", lambda c: c.query("SELECT 41 + 1").result_rows) == [(42,)]
    finally:
        await client.close()


async def test_every_chdb_client_shares_one_worker_thread(clickhouse_dsn: str) -> None:
    first, second = ClickHouseClient(clickhouse_dsn), ClickHouseClient(clickhouse_dsn)
    try:
        threads = [await c.run("thread", lambda _: threading.get_ident()) for c in (first, second)]
        assert threads[0] == threads[1] != threading.get_ident()
    finally:
        await first.close()
        await second.close()


async def test_a_closed_client_refuses_calls(clickhouse_dsn: str) -> None:
    client = ClickHouseClient(clickhouse_dsn)
    await client.close()
    await client.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        await client.run("ping", lambda c: c.command("SELECT 1"))


def test_rejects_unknown_schemes() -> None:
    with pytest.raises(ValueError, match="DSN scheme"):
        ClickHouseClient("mysql://x")
