"""The retry rules against a real outage: PostgreSQL killed under a real API app answers 503
`postgres_unavailable` with `Retry-After`; the client waits at least that long, retries with the
same message ids and gets the append through once PostgreSQL is back (restarted during the wait).

A private PostgreSQL server (`tests.private_postgres`: this test kills it)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import httpx
import pytest
from pydantic import SecretStr

from core.auth import issue_key
from core.config import Settings
from memstream.api import create_app
from memstream.client import AsyncMemstreamClient, RetryPolicy, UnavailableError
from memstream.wiring.api import build_api_deps
from sinks.postgres.api_keys import PostgresApiKeys
from sinks.postgres.errors import RETRY_AFTER_S
from sinks.postgres.migrations import migrate
from sinks.postgres.pool import create_pool
from sinks.slatedb.journal import SlateJournal
from tests.private_postgres import PrivatePostgres, private_postgres


@pytest.fixture
def postgres() -> Iterator[PrivatePostgres]:
    with private_postgres() as server:
        yield server


@pytest.fixture
async def app_and_key(
    postgres: PrivatePostgres, tmp_path: Path
) -> AsyncIterator[tuple[httpx.AsyncBaseTransport, str]]:
    settings = Settings(data_dir=tmp_path / "data", environment="test", postgres_dsn=SecretStr(postgres.dsn))
    pool: asyncpg.Pool = await create_pool(postgres.dsn, command_timeout=5)
    journal = await SlateJournal.open(settings.journal, flush_interval_ms=1)
    try:
        await migrate(pool)
        key = await issue_key(PostgresApiKeys(pool), "acme", "test")
        app = create_app(build_api_deps(settings, journal, pool))
        yield httpx.ASGITransport(app=app, raise_app_exceptions=False), key
    finally:
        await journal.close()
        await pool.close()


@pytest.mark.engine
async def test_an_append_rides_out_a_postgres_outage(
    app_and_key: tuple[httpx.AsyncBaseTransport, str], postgres: PrivatePostgres
) -> None:
    transport, key = app_and_key
    waits: list[float] = []

    async def restart_postgres_while_waiting(seconds: float) -> None:
        waits.append(seconds)
        postgres.restart()

    retry = RetryPolicy(max_attempts=3, initial_backoff_s=0.01, max_elapsed_s=60)
    async with AsyncMemstreamClient(
        "http://memstream.test", key, retry=retry, transport=transport, sleep=restart_postgres_while_waiting
    ) as ms:
        first = await ms.append("t-1", [{"role": "user", "content": "before"}], agent_id="agent-1")
        postgres.kill()
        second = await ms.append("t-1", [{"role": "user", "content": "during the outage"}])
        assert waits == [RETRY_AFTER_S]  # one 503, its Retry-After honoured over the 0.01 s backoff
        stored = (await ms.read_messages("t-1")).messages
        assert [m.content for m in stored] == ["before", "during the outage"]
        assert stored[1] == second.messages[0] and first.messages[0] == stored[0]

        postgres.kill()
        never = RetryPolicy(max_attempts=2, initial_backoff_s=0.01, max_elapsed_s=1)  # Retry-After too long
        async with AsyncMemstreamClient(
            "http://memstream.test", key, retry=never, transport=transport
        ) as short:
            with pytest.raises(UnavailableError) as raised:
                await short.get_thread("t-1")
        error = raised.value
        assert (error.status, error.code, error.retry_after_s) == (503, "postgres_unavailable", RETRY_AFTER_S)
