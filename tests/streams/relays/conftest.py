"""Fixtures of the relay tests: the memory service whose writes fill the entries outbox."""

from __future__ import annotations

import asyncpg
import pytest

from core.memory.service import MemoryService
from sinks.postgres.memory import PostgresMemoryStore
from tests.core.memory.helpers import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def service(pool: asyncpg.Pool, clock: FakeClock) -> MemoryService:
    return MemoryService(PostgresMemoryStore(pool), clock)
