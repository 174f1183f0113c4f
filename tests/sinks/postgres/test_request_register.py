"""`RequestTable` on Postgres, through both registers that use it: an unknown id is a LookupError
naming the request, a step report is merged by name, and `open` writes the extra columns."""

from __future__ import annotations

import asyncpg
import pytest

from sinks.postgres.deletions import PostgresDeletions
from sinks.postgres.erasures import PostgresErasures


async def test_an_unknown_request_is_a_lookup_error_naming_it(pool: asyncpg.Pool) -> None:
    with pytest.raises(LookupError, match="no thread deletion 424242"):
        await PostgresDeletions(pool).record_step(424242, "journal", {})
    with pytest.raises(LookupError, match="no user erasure 424242"):
        await PostgresErasures(pool).complete(424242)
    assert await PostgresDeletions(pool).get(424242) is None
    assert await PostgresErasures(pool).get(424242) is None


async def test_steps_merge_by_name_and_open_keeps_the_extra_columns(pool: asyncpg.Pool) -> None:
    register = PostgresDeletions(pool)
    opened = await register.open("dev", "acme", "t1", "agent-1", None)
    assert (opened.agent_id, opened.user_id, opened.thread_id) == ("agent-1", None, "t1")
    await register.record_step(opened.deletion_id, "summaries", {"versions": 2})
    await register.record_step(opened.deletion_id, "redis", {"keys": 1})
    record = await register.record_step(opened.deletion_id, "summaries", {"versions": 3})
    assert dict(record.report) == {"summaries": {"versions": 3}, "redis": {"keys": 1}}
    assert await register.get(opened.deletion_id) == record
    assert [r.deletion_id for r in await register.incomplete()] == [opened.deletion_id]
