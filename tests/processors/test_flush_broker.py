"""flush over real Postgres, a real SlateJournal and the real broker, with the offline model."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from core.chat.base import (
    FactsDraft,
    ModelUnavailable,
)
from core.chat.offline import OfflineChatModel
from core.config import Settings
from core.journal.models import Message, NewMessage, ThreadRef
from core.memory.agents import AgentRef, AgentService
from core.memory.models import MemoryEntry, MemoryScope
from core.memory.pinned import MemoryPinnedFacts
from core.memory.service import MemoryService
from memstream.wiring.processors import build_flush
from processors.errors import NeedsNode
from processors.flush import NAME, OUTPUT_TOPIC, SOURCE_TOPIC, Flush
from sinks.postgres.agents import PostgresAgents
from sinks.postgres.memory import PostgresMemoryStore
from sinks.postgres.migrations import migrate
from sinks.postgres.pool import create_pool
from sinks.slatedb.journal import SlateJournal
from streams.admin import apply_topics
from streams.runtime.processor import InvalidMessage, Processor, Record
from streams.topics import default_registry
from tests.processors.runtime_support import (
    broker_settings,
    committed_total,
    produce,
    seconds_to_stop,
    short_options,
    unreachable_publisher,
)
from tests.processors.topic_reading import read_thread_topic

USER_SAYS = ["Hi, my name is Ada.", "I prefer tea in the morning."]


class CountingModel(OfflineChatModel):
    """The offline model, counting `extract_facts` calls."""

    def __init__(self) -> None:
        self.extract_calls = 0

    async def extract_facts(self, messages: Sequence[Message]) -> FactsDraft:
        self.extract_calls += 1
        return await super().extract_facts(messages)


class UnreachableModel(CountingModel):
    """A model whose endpoint cannot be reached."""

    async def extract_facts(self, messages: Sequence[Message]) -> FactsDraft:
        self.extract_calls += 1
        raise ModelUnavailable("connection refused (after 3 attempts)")


@pytest.fixture
def settings_(broker: str, topic_prefix: str, tmp_path: Path) -> Settings:
    settings = broker_settings(broker, topic_prefix, tmp_path, redis_url="redis://127.0.0.1:1")
    reg = default_registry()
    apply_topics(settings, reg, topics=[reg.get(SOURCE_TOPIC), reg.get(OUTPUT_TOPIC), reg.dlq_topic(NAME)])
    return settings


@pytest.fixture
def model() -> CountingModel:
    return CountingModel()


@pytest.fixture
async def processor(
    settings_: Settings, journal: SlateJournal, pool: asyncpg.Pool, model: CountingModel
) -> AsyncIterator[Flush]:
    processor = Flush(
        settings_,
        journal,
        MemoryService(PostgresMemoryStore(pool)),
        AgentService(PostgresAgents(pool)),
        model,
    )
    await processor.start()
    try:
        yield processor
    finally:
        await processor.stop()


async def conversation(
    journal: SlateJournal, *, user: str | None = "u1", says: Sequence[str] = USER_SAYS
) -> list[Message]:
    """Four messages of agent `bot` in thread th-1: two user self-statements, two answers."""
    ref = ThreadRef(environment="test", account_id="acme", thread_id="th-1")
    stored: list[Message] = []
    for text in says:
        stored += await journal.append(ref, "bot", user, [NewMessage(role="user", content=text)])
        stored += await journal.append(ref, "bot", None, [NewMessage(role="assistant", content="Noted.")])
    return stored


def request_record(messages: Sequence[Message], *, user: str | None = "u1") -> Record:
    payload = {
        "schema_version": 1,
        "environment": "test",
        "account_id": "acme",
        "agent_id": "bot",
        "user_id": user,
        "thread_id": "th-1",
        "from_offset": messages[0].offset,
        "to_offset": messages[-1].offset,
        "tokens": sum(m.token_count for m in messages),
        "messages": len(messages),
        "reason": "messages",
        "requested_at": "2026-11-29T12:00:00Z",
    }
    default_registry().validate(SOURCE_TOPIC, payload)
    return Record(SOURCE_TOPIC, 0, 0, b"th-1", json.dumps(payload).encode(), (), None)


async def bind_memory(pool: asyncpg.Pool) -> None:
    await AgentService(PostgresAgents(pool)).bind(
        AgentRef(environment="test", account_id="acme", agent_id="bot"), ["Memory"]
    )


async def entries(pool: asyncpg.Pool, user: str | None) -> list[MemoryEntry]:
    scope = MemoryScope(environment="test", account_id="acme", agent_id="bot", user_id=user)
    page = await MemoryService(PostgresMemoryStore(pool)).list(scope, limit=500)
    return sorted(page.entries, key=lambda e: e.key)


def flushed(settings: Settings) -> list[dict[str, Any]]:
    """Every record on compaction.flushed so far (validated, keys checked)."""
    return read_thread_topic(settings, OUTPUT_TOPIC)


async def test_with_memory_bound_facts_are_stored_private_with_provenance_once(
    processor: Flush, journal: SlateJournal, pool: asyncpg.Pool, model: CountingModel, settings_: Settings
) -> None:
    await bind_memory(pool)
    messages = await conversation(journal)
    record = request_record(messages)
    await processor.process([record])
    stored = await entries(pool, "u1")
    await processor.process([record])  # redelivery
    assert await entries(pool, "u1") == stored  # nothing written again (same key, same content)
    assert [(e.key, e.visibility, e.user_id) for e in stored] == [
        ("user.name", "private", "u1"),
        ("user.preference.tea", "private", "u1"),
    ]
    assert "Ada" in stored[0].content and "tea" in stored[1].content
    assert stored[0].source is not None and stored[0].source.thread_id == "th-1"
    assert stored[0].source.message_ids == (messages[0].message_id,)
    assert stored[1].source is not None and stored[1].source.message_ids == (messages[2].message_id,)
    assert await entries(pool, None) == [] and await entries(pool, "u2") == []
    assert model.extract_calls == 2
    first, second = flushed(settings_)
    assert first == second
    assert first["flush"] == {"status": "stored", "facts_stored": 2, "facts_rejected": 0}
    assert (first["thread_id"], first["from_offset"], first["to_offset"]) == ("th-1", 0, 3)


async def test_without_memory_bound_nothing_is_stored_and_the_model_is_not_called(
    processor: Flush, journal: SlateJournal, pool: asyncpg.Pool, model: CountingModel, settings_: Settings
) -> None:
    messages = await conversation(journal)
    await processor.process([request_record(messages)])
    assert model.extract_calls == 0
    count = await pool.fetchval("SELECT count(*) FROM memory_entries")
    assert count == 0
    (record,) = flushed(settings_)
    assert record["flush"] == {"status": "skipped_no_memory", "facts_stored": 0, "facts_rejected": 0}


async def test_a_failing_model_is_counted_and_the_thread_still_moves_on(
    settings_: Settings, journal: SlateJournal, pool: asyncpg.Pool
) -> None:
    await bind_memory(pool)
    messages = await conversation(journal)
    model = UnreachableModel()
    processor = Flush(
        settings_,
        journal,
        MemoryService(PostgresMemoryStore(pool)),
        AgentService(PostgresAgents(pool)),
        model,
    )
    await processor.start()
    await processor.process([request_record(messages)])
    await processor.stop()
    assert model.extract_calls == 1
    assert await pool.fetchval("SELECT count(*) FROM memory_entries") == 0
    (record,) = flushed(settings_)
    assert record["flush"]["status"] == "failed"
    assert (record["flush"]["facts_stored"], record["flush"]["facts_rejected"]) == (0, 0)
    assert "ModelUnavailable" in record["flush"]["error"]


async def test_a_thread_without_user_stores_no_profile_facts(
    processor: Flush, journal: SlateJournal, pool: asyncpg.Pool, model: CountingModel, settings_: Settings
) -> None:
    """Issue 9, finding 12: "my name is Mallory" in a thread without a user is a fact about nobody
    in particular: it is refused (counted), never stored shared and pinned for every user."""
    await bind_memory(pool)
    says = ["Hi, my name is Mallory.", "I work at Evilcorp."]
    messages = await conversation(journal, user=None, says=says)
    await processor.process([request_record(messages, user=None)])
    assert model.extract_calls == 1
    assert await pool.fetchval("SELECT count(*) FROM memory_entries") == 0
    (record,) = flushed(settings_)
    assert record["flush"] == {"status": "stored", "facts_stored": 0, "facts_rejected": 2}
    pinning = MemoryPinnedFacts(MemoryService(PostgresMemoryStore(pool)))
    for user in ("u1", "u2", None):
        scope = MemoryScope(environment="test", account_id="acme", agent_id="bot", user_id=user)
        assert await pinning.pinned(scope) == []


async def test_an_invalid_request_is_dead_lettered_before_anything_is_done(
    processor: Flush, journal: SlateJournal, pool: asyncpg.Pool, model: CountingModel, settings_: Settings
) -> None:
    await bind_memory(pool)
    good = request_record(await conversation(journal))
    bad = Record(SOURCE_TOPIC, 0, 1, b"th-1", b'{"schema_version": 1}', (), None)
    with pytest.raises(InvalidMessage, match=r"compaction\.requested value is invalid"):
        await processor.process([good, bad])
    assert model.extract_calls == 0
    assert flushed(settings_) == []


def test_outside_the_node_the_processor_refuses_to_start(settings_: Settings) -> None:
    processor = build_flush(settings_)
    assert processor.name == NAME
    with pytest.raises(NeedsNode, match="runs inside the node"):
        asyncio.run(processor.start())


def test_stopping_while_the_broker_is_unreachable_takes_seconds_and_commits_nothing(
    settings_: Settings, pg_dsn: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    # the default drain timeout: a stop must not wait for it, nor for a broker that never answers
    options = short_options(request, batch_size=10, batch_wait_s=0.05, drain_timeout_s=10.0)
    model = CountingModel()

    @asynccontextmanager
    async def blocked_flush() -> AsyncIterator[tuple[Processor, Callable[[], Awaitable[bool]]]]:
        journal = await SlateJournal.open(f"file://{tmp_path}/journal", flush_interval_ms=1)
        pool = await create_pool(pg_dsn)
        try:
            await migrate(pool)
            await bind_memory(pool)
            record = request_record(await conversation(journal))
            produce(settings_, SOURCE_TOPIC, [(record.key, record.value)])
            publisher = unreachable_publisher(settings_, OUTPUT_TOPIC, tmp_path)
            processor = Flush(
                settings_,
                journal,
                MemoryService(PostgresMemoryStore(pool)),
                AgentService(PostgresAgents(pool)),
                model,
                publisher=publisher,
            )

            async def blocked() -> bool:  # facts extracted: the flushed record waits for the broker
                return model.extract_calls > 0

            yield processor, blocked
        finally:
            await pool.close()
            await journal.close()

    assert seconds_to_stop(settings_, options, default_registry(), blocked_flush) < 5.0
    assert committed_total(settings_, NAME, SOURCE_TOPIC) == 0  # redelivered to the next run
    assert flushed(settings_) == []
