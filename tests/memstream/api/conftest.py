"""The API over real components: Postgres (fresh database), SlateJournal (tmp dir), local summaries."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import httpx
import pytest
from fastapi import FastAPI
from pydantic import SecretStr

from core.auth import issue_key
from core.config import Settings
from memstream.api import ApiDeps, create_app
from memstream.wiring.api import build_api_deps
from sinks.postgres.api_keys import PostgresApiKeys
from sinks.slatedb.journal import SlateJournal


@pytest.fixture
def api_settings(tmp_path: Path, pg_dsn: str) -> Settings:
    return Settings(data_dir=tmp_path / "data", environment="test", postgres_dsn=SecretStr(pg_dsn))


@pytest.fixture
async def journal(api_settings: Settings) -> AsyncIterator[SlateJournal]:
    journal = await SlateJournal.open(api_settings.journal, flush_interval_ms=1)
    try:
        yield journal
    finally:
        await journal.close()


@pytest.fixture
def deps(api_settings: Settings, journal: SlateJournal, pool: asyncpg.Pool) -> ApiDeps:
    return build_api_deps(api_settings, journal, pool)


@pytest.fixture
def app(deps: ApiDeps) -> FastAPI:
    return create_app(deps)


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://memstream.test") as client:
        yield client


@dataclass
class Keys:
    acme: dict[str, str]
    globex: dict[str, str]


@pytest.fixture
async def keys(pool: asyncpg.Pool) -> Keys:
    """Authorization headers of two accounts of the test environment."""
    acme = await issue_key(PostgresApiKeys(pool), "acme", "test", "tests")
    globex = await issue_key(PostgresApiKeys(pool), "globex", "test", "tests")
    return Keys(acme={"Authorization": f"Bearer {acme}"}, globex={"Authorization": f"Bearer {globex}"})
