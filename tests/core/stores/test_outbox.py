"""The agent-memory outbox's contract (`core.stores.outbox`: `EntriesOutbox`, `OutboxBatch`,
`OutboxListener`, `AppliedOutbox`), on every store: the in-memory fake and Postgres. Claims one at a
time, `published()` committed with its claim, applied rows forgotten, unapplied ones republished
before newer rows, commit notifications. What only Postgres does (its tables, the advisory lock
across connections, an applied outbox on its own pool) is in `tests/sinks/postgres/test_outbox.py`."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import asyncpg
import pytest

from core.stores.outbox import AppliedOutbox, EntriesOutbox, OutboxRow
from sinks.postgres.outbox import PostgresAppliedOutbox, PostgresEntriesOutbox
from tests.fakes.outbox import InMemoryAppliedOutbox, InMemoryEntriesOutbox


@dataclass
class Outbox:
    """The outbox under test, its applied notes, and a writer of outbox rows (one transaction)."""

    entries: EntriesOutbox
    applied: AppliedOutbox
    write: Callable[..., Awaitable[None]]


def _postgres(pool: asyncpg.Pool) -> Outbox:
    async def write(*keys: str) -> None:
        rows = [(key, {"key": key}) for key in keys]
        async with pool.acquire() as conn, conn.transaction():
            await conn.executemany("INSERT INTO memory_outbox (record_key, value) VALUES ($1, $2)", rows)

    return Outbox(PostgresEntriesOutbox(pool), PostgresAppliedOutbox(pool), write)


def _memory() -> Outbox:
    outbox = InMemoryEntriesOutbox()

    async def write(*keys: str) -> None:
        await outbox.write([(key, {"key": key}) for key in keys])

    return Outbox(outbox, InMemoryAppliedOutbox(outbox), write)


@pytest.fixture(params=["memory", pytest.param("postgres", marks=pytest.mark.engine)])
def outbox(request: pytest.FixtureRequest) -> Outbox:
    """An empty outbox."""
    if request.param == "memory":
        return _memory()
    return _postgres(request.getfixturevalue("pool"))


async def _publish(outbox: Outbox, limit: int = 100) -> list[OutboxRow]:
    """One claim, confirmed: its rows."""
    async with outbox.entries.claim(limit) as batch:
        assert batch is not None
        await batch.published()
        return list(batch.rows)


def _keys(rows: list[OutboxRow]) -> list[str]:
    return [row.record_key for row in rows]


async def test_a_published_claim_moves_its_rows_and_forgets_what_was_applied(outbox: Outbox) -> None:
    await outbox.write("a", "b", "c")
    assert await outbox.entries.pending() == 3
    async with outbox.entries.claim(2) as batch:
        assert batch is not None
        assert _keys(list(batch.rows)) == ["a", "b"]
        assert batch.rows[0] == OutboxRow(batch.rows[0].seq, "a", {"key": "a"})
        assert batch.rows[0].seq < batch.rows[1].seq
        await batch.published()
    first = [row.seq for row in batch.rows]
    assert await outbox.entries.pending() == 1
    await outbox.applied.record(first[:1])
    last = await _publish(outbox)
    assert _keys(last) == ["c"] and last[0].seq > first[1]
    assert await outbox.entries.pending() == 0
    # the applied one is forgotten; the two others would go back
    assert await outbox.entries.republish_unapplied() == 2
    assert [row.seq for row in await _publish(outbox)] == [first[1], last[0].seq]


async def test_a_claim_that_fails_keeps_its_rows(outbox: Outbox) -> None:
    await outbox.write("a")
    with pytest.raises(RuntimeError):
        async with outbox.entries.claim(10) as batch:
            assert batch is not None
            await batch.published()
            raise RuntimeError("the broker did not confirm")
    assert await outbox.entries.pending() == 1
    assert await outbox.entries.republish_unapplied() == 0  # nothing was published
    async with outbox.entries.claim(10) as batch:  # a claim not confirmed changes nothing either
        assert batch is not None and _keys(list(batch.rows)) == ["a"]
    assert await outbox.entries.pending() == 1


async def test_one_claim_at_a_time_and_republish_waits_for_it(outbox: Outbox) -> None:
    await outbox.write("a", "b")
    async with outbox.entries.claim(1) as batch:
        assert batch is not None
        async with outbox.entries.claim(1) as other:
            assert other is None  # another relay holds the claim
        republish = asyncio.create_task(outbox.entries.republish_unapplied())
        await asyncio.sleep(0.2)
        assert not republish.done()
        await batch.published()
    assert await republish == 1  # the row just published goes back, before the newer one
    assert await outbox.entries.pending() == 2
    assert _keys(await _publish(outbox)) == ["a", "b"]


async def test_rows_not_applied_go_back_before_newer_rows(outbox: Outbox) -> None:
    await outbox.write("a", "b", "c")
    seqs = [row.seq for row in await _publish(outbox)]
    await outbox.applied.record(seqs[:1])
    await outbox.write("d")  # not published yet
    assert await outbox.entries.republish_unapplied() == 2
    assert await outbox.entries.republish_unapplied() == 0  # nothing published any more
    again = await _publish(outbox)
    assert _keys(again) == ["b", "c", "d"] and [row.seq for row in again][:2] == seqs[1:]
    assert await outbox.entries.republish_unapplied() == 3  # still not applied: they go back again


async def test_applied_notes_are_idempotent_and_wait_for_their_rows(outbox: Outbox) -> None:
    await outbox.applied.start()
    try:
        await outbox.write("a", "b")
        async with outbox.entries.claim(10) as batch:
            assert batch is not None
            seqs = [row.seq for row in batch.rows]  # not confirmed: the rows stay in the outbox
        await outbox.applied.record([])
        await outbox.applied.record(seqs[:1])  # noted before its row is published (a republished row)
        await outbox.applied.record(seqs[:1])
        assert _keys(await _publish(outbox)) == ["a", "b"]
        assert await outbox.entries.republish_unapplied() == 1  # "a" was forgotten at once
        assert _keys(await _publish(outbox)) == ["b"]
    finally:
        await outbox.applied.stop()


async def test_listen_is_notified_when_outbox_rows_commit(outbox: Outbox) -> None:
    woken = asyncio.Event()
    calls: list[None] = []

    def on_notify() -> None:
        calls.append(None)
        woken.set()

    listener = await outbox.entries.listen(on_notify)
    try:
        assert listener.usable()
        await outbox.write("a")
        await asyncio.wait_for(woken.wait(), 5)
        await _publish(outbox)
        woken.clear()
        assert await outbox.entries.republish_unapplied() == 1  # rows written back into the outbox
        await asyncio.wait_for(woken.wait(), 5)
    finally:
        await listener.close()
    assert not listener.usable()
    seen = len(calls)
    await outbox.write("b")
    await asyncio.sleep(0.2)
    assert len(calls) == seen  # closed: no more calls
