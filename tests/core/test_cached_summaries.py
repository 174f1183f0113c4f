"""`core.cached_summaries.CachedSummaries` over a counting reader: hits (a summary, and "none yet"),
TTL, tenancy (the scope is the key), notices evict their thread only, bypass while the feed is
down, a notice during a read. Against Postgres and its feed: `tests/sinks/postgres/test_invalidation.py`."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from core.cached_summaries import CachedSummaries
from core.invalidated_cache import InvalidatedCache
from core.journal.models import ThreadRef
from core.summaries.models import Summary
from tests.core.ticks import Ticks

pytestmark = pytest.mark.unit

T1 = ThreadRef(environment="test", account_id="acme", thread_id="t1")


def summary(version: int) -> Summary:
    return Summary(
        version=version,
        timestamp=datetime(2026, 12, 1, tzinfo=UTC),
        last_message_offset=10 * version,
        last_message_id=f"m{version}",
        content=f"summary v{version}",
        token_count=3,
        message_count=10 * version,
    )


class Reader:
    """Summaries by (environment, account, agent, thread); counts reads."""

    def __init__(self) -> None:
        self.summaries: dict[tuple[str, str, str, str], Summary] = {}
        self.reads = 0

    async def read(self, thread: ThreadRef, agent_id: str) -> Summary | None:
        self.reads += 1
        return self.summaries.get((thread.environment, thread.account_id, agent_id, thread.thread_id))


@pytest.fixture
def reader() -> Reader:
    return Reader()


@pytest.fixture
def ticks() -> Ticks:
    return Ticks()


@pytest.fixture
def cached(reader: Reader, ticks: Ticks) -> CachedSummaries:
    summaries = CachedSummaries(reader, ttl_s=5, cache=InvalidatedCache(clock=ticks))
    summaries.set_live(True)
    return summaries


async def test_a_summary_and_none_yet_are_both_kept_until_the_ttl(
    cached: CachedSummaries, reader: Reader, ticks: Ticks
) -> None:
    assert await cached.read(T1, "bot") is None
    assert await cached.read(T1, "bot") is None
    assert reader.reads == 1
    reader.summaries["test", "acme", "bot", "t1"] = summary(1)
    assert await cached.read(T1, "bot") is None  # not announced: the TTL bounds it
    ticks.now = 5.1
    assert await cached.read(T1, "bot") == summary(1)
    assert await cached.read(T1, "bot") == summary(1)
    assert reader.reads == 2


async def test_each_thread_scope_is_its_own_entry(cached: CachedSummaries, reader: Reader) -> None:
    reader.summaries["test", "acme", "bot", "t1"] = summary(1)
    assert await cached.read(T1, "bot") == summary(1)
    for thread, agent in [
        (T1, "other-agent"),
        (ThreadRef(environment="test", account_id="globex", thread_id="t1"), "bot"),
        (ThreadRef(environment="prod", account_id="acme", thread_id="t1"), "bot"),
        (ThreadRef(environment="test", account_id="acme", thread_id="t2"), "bot"),
    ]:
        assert await cached.read(thread, agent) is None


async def test_a_notice_evicts_its_thread_only(cached: CachedSummaries, reader: Reader) -> None:
    t2 = ThreadRef(environment="test", account_id="acme", thread_id="t2")
    await cached.read(T1, "bot")
    await cached.read(t2, "bot")
    reader.summaries["test", "acme", "bot", "t1"] = summary(1)
    reader.summaries["test", "acme", "bot", "t2"] = summary(1)
    cached.invalidated(json.dumps(["test", "acme", "bot", "t1"]))
    assert await cached.read(T1, "bot") == summary(1)
    assert await cached.read(t2, "bot") is None
    assert reader.reads == 3


@pytest.mark.parametrize(
    "payload", ["*", "nonsense", '["test", "acme", "bot"]', '["test", "acme", "bot", 7]']
)
async def test_a_notice_that_is_not_a_thread_forgets_everything(
    cached: CachedSummaries, reader: Reader, payload: str
) -> None:
    await cached.read(T1, "bot")
    cached.invalidated(payload)
    await cached.read(T1, "bot")
    assert reader.reads == 2


async def test_the_reader_answers_while_the_feed_is_down(cached: CachedSummaries, reader: Reader) -> None:
    cached.set_live(False)
    await cached.read(T1, "bot")
    await cached.read(T1, "bot")
    assert reader.reads == 2


async def test_a_notice_during_a_read_is_not_overwritten_by_the_older_value(
    cached: CachedSummaries, reader: Reader
) -> None:
    real = reader.read

    async def racing(thread: ThreadRef, agent_id: str) -> Summary | None:
        found = await real(thread, agent_id)
        reader.summaries["test", "acme", "bot", "t1"] = summary(2)
        cached.invalidated(json.dumps(["test", "acme", "bot", "t1"]))  # written meanwhile
        return found

    reader.read = racing  # type: ignore[method-assign]
    assert await cached.read(T1, "bot") is None
    reader.read = real  # type: ignore[method-assign]
    assert await cached.read(T1, "bot") == summary(2)
