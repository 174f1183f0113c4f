"""Which failures mean "PostgreSQL is unavailable": the driver's connection errors (from a real
refused connection), not query errors, not other libraries' OSErrors."""

from __future__ import annotations

import asyncpg
import pytest

from memstream.embedded.process import free_port
from sinks.postgres.errors import is_postgres_unavailable


async def _refused() -> BaseException:
    try:
        await asyncpg.connect(f"postgresql://postgres@127.0.0.1:{free_port()}/postgres", timeout=5)
    except Exception as exc:
        return exc
    raise AssertionError("connected to a port nobody listens on")


async def test_a_refused_connection_is_unavailable() -> None:
    exc = await _refused()
    assert isinstance(exc, OSError)
    assert is_postgres_unavailable(exc)


async def test_an_error_raised_from_a_refused_connection_is_unavailable() -> None:
    cause = await _refused()
    try:
        raise RuntimeError("lookup failed") from cause
    except RuntimeError as wrapped:
        assert is_postgres_unavailable(wrapped)
    try:
        raise RuntimeError("lookup failed") from None
    except RuntimeError as hidden:  # `from None`: the refused connection is not its cause
        hidden.__context__ = cause
        assert not is_postgres_unavailable(hidden)


async def test_driver_connection_classes_are_unavailable() -> None:
    for exc in (
        asyncpg.exceptions.ConnectionDoesNotExistError("connection was closed in the middle of operation"),
        asyncpg.exceptions.CannotConnectNowError("the database system is starting up"),
        asyncpg.exceptions.AdminShutdownError("terminating connection due to administrator command"),
        asyncpg.exceptions.TooManyConnectionsError("sorry, too many clients already"),
        asyncpg.InterfaceError("cannot call Connection.fetch(): connection is closed"),
        # a connection the server ended while it was idle in the pool (tests/sinks/postgres/test_pool.py)
        asyncpg.InternalClientError("cannot switch to state 12; another operation (2) is in progress"),
    ):
        assert is_postgres_unavailable(exc), exc


async def test_query_errors_are_not_unavailable(pool: asyncpg.Pool) -> None:
    with pytest.raises(asyncpg.PostgresSyntaxError) as syntax:
        await pool.fetchval("SELEC 1")
    assert not is_postgres_unavailable(syntax.value)
    with pytest.raises(asyncpg.DataError) as data:
        await pool.fetchval("SELECT $1::int", "not a number")
    assert not is_postgres_unavailable(data.value)
    assert not is_postgres_unavailable(asyncpg.InterfaceError("the server expects 1 argument, 2 were passed"))


def test_other_libraries_os_errors_are_not_unavailable() -> None:
    with pytest.raises(OSError) as missing:
        open("/nonexistent/memstream/file")
    assert not is_postgres_unavailable(missing.value)
    refused_elsewhere = ConnectionRefusedError(111, "Connection refused")  # not raised inside asyncpg
    assert not is_postgres_unavailable(refused_elsewhere)
