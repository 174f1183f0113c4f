"""The API over a journal of three shards of which this node has two open (real SlateDB journals,
real Postgres): a thread of a local shard is served from its shard's journal and shows its shard,
a thread of the shard that is not local answers 503 `shard_not_local` with Retry-After and leaves
nothing behind."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import httpx
import pytest

from core.config import Settings
from core.sharding.journal import ShardedJournal
from core.sharding.shards import shard_of
from memstream.api import create_app
from memstream.wiring.api import build_api_deps
from sinks.slatedb.journal import SlateJournal
from tests.sinks.slatedb.helpers import open_shards

from ..conftest import Keys

SHARDS = 3
MISSING = 1


def thread_of_shard(shard: int) -> str:
    return next(f"t-{i}" for i in range(1000) if shard_of("test", "acme", f"t-{i}", SHARDS) == shard)


@pytest.fixture
async def local(tmp_path: Path) -> AsyncIterator[ShardedJournal[SlateJournal]]:
    journal = await open_shards(str(tmp_path), SHARDS, missing=frozenset({MISSING}))
    try:
        yield journal
    finally:
        await journal.close()


@pytest.fixture
async def sharded_client(
    api_settings: Settings, local: ShardedJournal[SlateJournal], pool: asyncpg.Pool
) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(build_api_deps(api_settings, local, pool))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://memstream.test"
    ) as c:
        yield c


async def test_each_thread_is_served_by_its_shard_and_shows_it(
    sharded_client: httpx.AsyncClient, keys: Keys, local: ShardedJournal[SlateJournal]
) -> None:
    for shard in (0, 2):
        thread = thread_of_shard(shard)
        body = {"agent_id": "bot", "messages": [{"role": "user", "content": f"hello {shard}"}]}
        response = await sharded_client.post(f"/v1/threads/{thread}/messages", json=body, headers=keys.acme)
        assert response.status_code == 201, response.text
        [stored] = response.json()["messages"]
        assert (stored["shard"], stored["seq"]) == (shard, 1)  # each shard numbers its own seqs
        page = await sharded_client.get(f"/v1/threads/{thread}/messages", headers=keys.acme)
        assert [(m["shard"], m["seq"]) for m in page.json()["messages"]] == [(shard, 1)]
        context = await sharded_client.get(f"/v1/threads/{thread}/context", headers=keys.acme)
        assert [m["content"] for m in context.json()["messages"]] == [f"hello {shard}"]
        assert await local.local()[shard].last_seq() == 1
    assert (await sharded_client.get("/readyz")).json()["checks"]["journal"]["ok"] is True


async def test_a_thread_of_a_shard_not_open_here_is_503_and_nothing_is_left(
    sharded_client: httpx.AsyncClient, keys: Keys
) -> None:
    thread = thread_of_shard(MISSING)
    body = {"agent_id": "bot", "messages": [{"role": "user", "content": "hello"}]}
    response = await sharded_client.post(f"/v1/threads/{thread}/messages", json=body, headers=keys.acme)
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "1"
    error = response.json()["error"]
    assert error["code"] == "shard_not_local"
    assert f"journal shard {MISSING}, which is not open on this node" in error["message"]
    assert (await sharded_client.get(f"/v1/threads/{thread}", headers=keys.acme)).status_code == 404
