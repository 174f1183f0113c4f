"""Erasing a user end to end through a real node process and `memstream erase-user`: two users of one
account append threads (one long enough to be compacted: summary, threshold state, facts the flush
extracted) and store private and shared memory; once ClickHouse and Qdrant have projected it all,
one user is erased. Then `memstream verify` is clean, and with the node stopped every store is read
directly: the journal, Postgres, ClickHouse (chdb), Qdrant (Edge), the summaries on disk and Redis
hold nothing of the erased user and everything of the other."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import redis.asyncio as aioredis
from click.testing import CliRunner

from core.config import Settings
from memstream.cli import main
from sinks.postgres.pool import create_pool
from sinks.slatedb.journal import SlateJournal
from tests.memstream.node_process import RunningNode, running_node
from tests.memstream.thread_memory import append_messages, wait_for_summary

RUN = uuid.uuid4().hex[:6]
ADA_TRIP, ADA_SHORT, BOB_TRIP, BOB_SHORT = (
    f"{name}-{RUN}" for name in ("ada-trip", "ada-short", "bob-trip", "bob-short")
)


def tool(api: httpx.Client, name: str, user: str, **arguments: Any) -> dict[str, Any]:
    response = api.post(f"/v1/agents/bot/tools/{name}", json={"arguments": arguments, "user_id": user})
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()["result"]
    return result


def eventually(check: Any, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.5)


def searched(api: httpx.Client, user: str) -> int:
    return int(tool(api, "journal_message_search", user, query="trip", summarize=False)["count"])


def entry_ids(api: httpx.Client, user: str) -> dict[str, dict[str, Any]]:
    entries = api.get("/v1/agents/bot/memory", params={"user_id": user, "limit": 100}).json()["entries"]
    return {e["entry_id"]: e for e in entries}


def test_an_erased_user_is_gone_from_every_store_and_the_other_user_stays(
    settings: Settings, tmp_path: Path
) -> None:
    with running_node(settings, tmp_path) as node:
        erasure_id, ada_private, bob_private = _erase_through_the_node(node, settings)
    # with the node stopped (one process per embedded engine), every store read directly
    asyncio.run(_check_every_store(settings, ada_private, bob_private, erasure_id))
    # ClickHouse (the transcript projection) and Qdrant (the memory index), read by a process of
    # their own (chdb opens one data path per process, and this one may have opened another)
    read = subprocess.run(
        [sys.executable, "-c", READ_PROJECTIONS], env=node.env, capture_output=True, text=True, timeout=300
    )
    assert read.returncode == 0, read.stderr
    projections = json.loads(read.stdout.strip().splitlines()[-1])
    assert projections["counts"] == {BOB_TRIP: 55, BOB_SHORT: 4}
    indexed = set(projections["indexed"])
    assert not indexed & ada_private and bob_private <= indexed


def _erase_through_the_node(node: RunningNode, settings: Settings) -> tuple[int, set[str], set[str]]:
    api = node.api
    assert api.put("/v1/agents/bot", json={"capabilities": ["memory"]}).status_code == 200
    append_messages(api, ADA_TRIP, "ada", 55, "My name is Ada. I prefer window seats on the trip.")
    append_messages(api, BOB_TRIP, "bob", 55, "My name is Bob. I prefer aisle seats on the trip.")
    append_messages(api, ADA_SHORT, "ada", 4, "Ada asks about the trip budget.")
    append_messages(api, BOB_SHORT, "bob", 4, "Bob asks about the trip budget.")
    tool(
        api,
        "memory_store",
        "ada",
        key="user.diet",
        content="Ada is vegetarian.",
        category="user_profile",
        importance=0.9,
    )
    shared = tool(
        api,
        "memory_store",
        "ada",
        key="deploy.day",
        content="Deploys are on Tuesdays.",
        category="project_fact",
        scope="shared",
    )
    tool(
        api,
        "memory_store",
        "bob",
        key="user.diet",
        content="Bob eats everything.",
        category="user_profile",
        importance=0.9,
    )
    for thread in (ADA_TRIP, BOB_TRIP):  # compacted: a summary, after the flush's facts
        wait_for_summary(api, thread)
    eventually(
        lambda: searched(api, "ada") >= 2 and searched(api, "bob") >= 2, "ClickHouse never projected both"
    )

    def from_index(user: str) -> bool:
        recalled = tool(api, "memory_recall", user, query="what does the user eat?")
        return bool(recalled["path"] == "qdrant" and recalled["count"])

    eventually(lambda: from_index("ada") and from_index("bob"), "Qdrant never projected both")
    ada_private = {i for i, e in entry_ids(api, "ada").items() if e["visibility"] == "private"}
    bob_private = {i for i, e in entry_ids(api, "bob").items() if e["visibility"] == "private"}
    assert len(ada_private) >= 2 and bob_private  # the diet, and the facts the flush extracted

    erased = CliRunner().invoke(
        main, ["erase-user", "--account", "acme", "--user", "ada", "--yes", "--json"], env=node.env
    )
    assert erased.exit_code == 0, erased.output
    report = json.loads(erased.stdout)
    threads = report["erased"]["threads"]
    assert sorted(d["thread_id"] for d in threads["deletions"]) == sorted([ADA_TRIP, ADA_SHORT])
    assert threads["deleted"]["journal"] == {"messages": 59} and threads["deleted"]["thread"] == {"rows": 2}
    assert threads["deleted"]["summaries"]["objects"] >= 2  # the pointer and version 1 of the trip
    assert report["erased"]["memory"]["private_entries"] == len(ada_private) - threads["deleted"].get(
        "memory", {}
    ).get("entries", 0)
    assert report["erased"]["memory"]["unlinked_entries"] == 1

    # through the API: ada's threads and private entries are gone, the shared one has no author
    for thread in (ADA_TRIP, ADA_SHORT):
        assert api.get(f"/v1/threads/{thread}").status_code == 404
    assert api.get("/v1/threads", params={"user_id": "ada"}).json()["threads"] == []
    assert set(entry_ids(api, "ada")) == {shared["entry"]["entry_id"]}
    assert entry_ids(api, "ada")[shared["entry"]["entry_id"]]["author_user_id"] is None
    eventually(lambda: searched(api, "ada") == 0, "ClickHouse kept ada's messages")
    assert searched(api, "bob") >= 2 and api.get(f"/v1/threads/{BOB_TRIP}").status_code == 200

    verified = CliRunner().invoke(main, ["verify", "--wait", "60", "--json"], env=node.env)
    assert verified.exit_code == 0, verified.output
    verify = json.loads(verified.stdout)
    assert verify["erasure_leftovers"] == [] and verify["incomplete_erasures"] == []
    asyncio.run(_wait_for_the_index(settings))  # the tombstones have reached Qdrant
    return int(report["erasure_id"]), ada_private, bob_private


async def _wait_for_the_index(settings: Settings) -> None:
    pool = await create_pool(settings.postgres, min_size=1, max_size=1)
    try:
        deadline = time.monotonic() + 90
        while await pool.fetchval(
            "SELECT (SELECT count(*) FROM memory_outbox) + (SELECT count(*) FROM memory_outbox_published)"
        ):
            assert time.monotonic() < deadline, "the qdrant-projection never applied the erasure's tombstones"
            await asyncio.sleep(0.5)
    finally:
        await pool.close()


READ_PROJECTIONS = """
import asyncio, json
from core.config import Settings
from core.embeddings.base import SparseVector
from core.stores.vectors import CollectionRef, IndexFilter
from memstream.engines import Engines

async def main():
    settings = Settings()
    engines = Engines(settings)
    try:
        counts = await engines.transcripts().thread_counts(settings.environment)
        embedder = engines.embedder()
        dense = (await embedder.embed(["what does the user eat?"]))[0]
        collection = CollectionRef(
            environment=settings.environment, account_id="acme", model_id=embedder.model_id
        )
        nothing = SparseVector(indices=(), values=())
        indexed = [
            hit.entry_id
            for user in ("ada", "bob")
            for hit in await engines.index().hybrid_query(
                collection, dense, nothing, IndexFilter(agent_id="bot", user_id=user), 100
            )
        ]
    finally:
        await engines.close()
    print(json.dumps({"counts": {c.thread_id: c.messages for c in counts}, "indexed": indexed}))

asyncio.run(main())
"""


async def _check_every_store(
    settings: Settings, ada_private: set[str], bob_private: set[str], erasure_id: int
) -> None:
    ada_threads, bob_threads = {ADA_TRIP, ADA_SHORT}, {BOB_TRIP, BOB_SHORT}
    # the journal: no message of ada's, every one of bob's
    journal = await SlateJournal.open(settings.journal)
    try:
        messages, after = [], 0
        while page := await journal.read_from_seq(after, 1000):
            messages += page
            after = page[-1].seq
    finally:
        await journal.close()
    assert not [m for m in messages if m.user_id == "ada" or m.thread_id in ada_threads]
    assert {m.thread_id for m in messages} == bob_threads and len(messages) == 59

    # Postgres: threads, memory entries, quarantine, compaction rows; the registers
    pool = await create_pool(settings.postgres, min_size=1, max_size=1)
    try:
        assert {r["thread_id"] for r in await pool.fetch("SELECT thread_id FROM threads")} == bob_threads
        named = "user_id = 'ada' OR author_user_id = 'ada'"
        assert await pool.fetchval(f"SELECT count(*) FROM memory_entries WHERE {named}") == 0
        assert await pool.fetchval(f"SELECT count(*) FROM memory_quarantine WHERE {named}") == 0
        bobs = await pool.fetch("SELECT entry_id FROM memory_entries WHERE user_id = 'bob'")
        assert {str(r["entry_id"]) for r in bobs} == bob_private
        compacted = await pool.fetch("SELECT DISTINCT thread_id FROM thread_compactions")
        assert {r["thread_id"] for r in compacted} == {BOB_TRIP}
        erasure = await pool.fetchrow(
            "SELECT user_id, completed_at FROM user_erasures WHERE erasure_id = $1", erasure_id
        )
        assert erasure is not None and erasure["completed_at"] is not None
        assert await pool.fetchval("SELECT count(*) FROM thread_deletions WHERE completed_at IS NULL") == 0
    finally:
        await pool.close()

    # the summaries on disk: the trip of bob's only
    objects = settings.data_path / "objects"
    files = [f.relative_to(objects).as_posix() for f in objects.rglob("*") if f.is_file()]
    assert files and all(BOB_TRIP in f for f in files), files

    # Redis: bob's threshold state, nothing of ada's threads
    client = aioredis.from_url(settings.redis)
    try:
        keys = [key.decode() async for key in client.scan_iter(match=f"*{RUN}*")]
    finally:
        await client.aclose()
    assert not [k for k in keys if ADA_TRIP in k or ADA_SHORT in k], keys
    assert any(BOB_TRIP in k for k in keys), keys
