"""`SlateJournal.last` answered from the windows the writer keeps (`sinks.slatedb.windows`): what it
answers is exactly what storage holds, whatever the interleaving of appends, reads, retries and
failures."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from core.errors import JournalUnavailable
from core.journal.models import Message, ThreadRef
from sinks.slatedb.journal import SlateJournal

from .helpers import thread, tool_call_pair, user


class Scans:
    """Wraps the journal's Db for its reads: counts prefix scans; with `pause`, a scan stops after
    reading its first rows (`read` is set) until `release` is set."""

    def __init__(self, db: Any, *, pause: bool = False) -> None:
        self.db = db
        self.pause = pause
        self.count = 0
        self.read = asyncio.Event()
        self.release = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.db, name)

    async def scan_prefix_with_options(self, *args: Any) -> Any:
        self.count += 1
        return _PausedIterator(await self.db.scan_prefix_with_options(*args), self)


class _PausedIterator:
    def __init__(self, iterator: Any, scans: Scans) -> None:
        self._iterator = iterator
        self._scans = scans

    async def next_batch(self, n: int) -> Any:
        batch = await self._iterator.next_batch(n)
        if self._scans.pause:
            self._scans.read.set()
            await self._scans.release.wait()
        return batch


class HeldAcks:
    """Wraps the writer's Db: a group's batch is written, then its wait for durability starts only
    once `release` is set (`written` is set when it gets there)."""

    def __init__(self, db: Any) -> None:
        self.db = db
        self.written = asyncio.Event()
        self.release = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.db, name)

    async def write(self, batch: Any) -> Any:
        return _HeldHandle(await self.db.write(batch), self)


class _HeldHandle:
    def __init__(self, handle: Any, held: HeldAcks) -> None:
        self._handle = handle
        self._held = held

    async def await_durable(self) -> Any:
        self._held.written.set()
        await self._held.release.wait()
        return await self._handle.await_durable()


async def stored(journal: SlateJournal, thread_: ThreadRef) -> list[Message]:
    """Every durable message of the thread, read from storage (`after` keeps nothing)."""
    return await journal.after(thread_, -1, 100_000)


def contents(messages: list[Message]) -> list[str]:
    return [m.content for m in messages]


async def test_kept_windows_are_what_storage_holds_after_interleaved_appends(
    journal: SlateJournal, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads = [thread(f"t{i}") for i in range(8)]
    rng = random.Random(11)
    for round_ in range(40):
        calls: list[Any] = []
        for k in range(rng.randint(1, 6)):
            messages = [user(f"r{round_} {k} {j}") for j in range(rng.randint(1, 3))]
            calls.append(journal.append(rng.choice(threads), "a", "u1", messages))
        calls.extend(journal.last(rng.choice(threads), rng.randint(1, 20)) for _ in range(3))
        if round_ % 7 == 0:
            calls.append(journal.append(rng.choice(threads), "a", None, tool_call_pair(f"call-{round_}")))
        rng.shuffle(calls)
        await asyncio.gather(*calls)
    for t in threads:
        await journal.last(t, 1)
    windows = journal._commits.windows
    assert len(windows) == len(threads)
    scans = Scans(journal._db)
    monkeypatch.setattr(journal, "_db", scans)
    for t in threads:
        every = await stored(journal, t)
        assert len(every) > 20
        for n in range(1, 26):
            answer = await journal.last(t, n)
            assert answer == every[-n:]
            assert [m.model_dump_json() for m in answer] == [m.model_dump_json() for m in every[-n:]]
    assert scans.count == len(threads) * (1 + 5)  # `stored`, and n = 21..25; never n <= 20


async def test_a_scan_that_raced_a_commit_is_not_kept(
    journal: SlateJournal, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = thread()
    await journal.append(t, "a", None, [user("one")])
    scans = Scans(journal._db, pause=True)
    monkeypatch.setattr(journal, "_db", scans)
    reading = asyncio.create_task(journal.last(t, 20))
    await scans.read.wait()  # the scan has read its rows
    await journal.append(t, "a", None, [user("two")])  # durable; the thread is not kept yet
    scans.release.set()
    assert contents(await reading) == ["one"]  # what the scan saw: keeping it would be stale
    assert len(journal._commits.windows) == 0
    scans.pause = False
    assert contents(await journal.last(t, 20)) == ["one", "two"]
    assert len(journal._commits.windows) == 1
    assert contents(await journal.last(t, 20)) == ["one", "two"]
    assert scans.count == 2


async def test_a_scan_kept_before_a_commit_it_missed_is_brought_up_to_date(
    journal: SlateJournal, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = thread()
    await journal.append(t, "a", None, [user("one")])
    scans = Scans(journal._db, pause=True)
    monkeypatch.setattr(journal, "_db", scans)
    held = HeldAcks(journal._commits._db)
    monkeypatch.setattr(journal._commits, "_db", held)
    reading = asyncio.create_task(journal.last(t, 20))
    await scans.read.wait()
    appending = asyncio.create_task(journal.append(t, "a", None, [user("two")]))
    await held.written.wait()  # written, not acknowledged
    scans.release.set()
    assert contents(await reading) == ["one"]
    assert contents(journal._commits.windows.get(("test", "acc1", "t1"), 20) or []) == ["one"]
    held.release.set()
    await appending
    scans.pause = False
    assert contents(await journal.last(t, 20)) == ["one", "two"]  # from memory
    assert scans.count == 1
    assert await journal.last(t, 20) == await stored(journal, t)


async def test_a_scan_kept_before_the_ack_of_a_commit_it_saw_does_not_repeat_it(
    journal: SlateJournal, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = thread()
    await journal.append(t, "a", None, [user("one")])
    held = HeldAcks(journal._commits._db)
    monkeypatch.setattr(journal._commits, "_db", held)
    appending = asyncio.create_task(journal.append(t, "a", None, [user("two")]))
    await held.written.wait()
    for _ in range(500):  # SlateDB flushes its WAL by itself within milliseconds
        if len(await stored(journal, t)) == 2:
            break
        await asyncio.sleep(0.01)
    assert contents(await journal.last(t, 20)) == ["one", "two"]  # kept: no commit added since
    assert len(journal._commits.windows) == 1
    held.release.set()
    await appending
    assert contents(journal._commits.windows.get(("test", "acc1", "t1"), 20) or []) == ["one", "two"]
    assert await journal.last(t, 20) == await stored(journal, t)


async def test_a_failed_group_clears_the_windows_until_the_next_commit(journal: SlateJournal) -> None:
    t, other = thread(), thread("t2")
    await journal.append(t, "a", None, [user("first")])
    await journal.append(other, "a", None, [user("other")])
    await journal.last(t, 20)
    await journal.last(other, 20)
    windows = journal._commits.windows
    assert len(windows) == 2
    journal._commits.write_timeout_s = 0
    with pytest.raises(JournalUnavailable):
        await journal.append(t, "a", None, [user("lost?", "m1")])
    journal._commits.write_timeout_s = 30
    assert len(windows) == 0
    await journal.last(t, 20)  # uncertain: read from storage, not kept
    await journal.last(other, 20)
    assert len(windows) == 0
    retried = await journal.append(t, "a", None, [user("lost?", "m1")])  # answered from the row
    assert await journal.last(t, 20) == await stored(journal, t)
    assert contents(await journal.last(t, 20)) == ["first", "lost?"]
    assert (await journal.last(t, 1)) == retried
    await journal.append(t, "a", None, [user("next")])
    assert contents(await journal.last(t, 20)) == ["first", "lost?", "next"]
    assert await journal.last(t, 20) == await stored(journal, t)
    assert await journal.last(other, 20) == await stored(journal, other)


async def test_a_scan_begun_before_a_failed_group_is_not_kept(
    journal: SlateJournal, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = thread()
    await journal.append(t, "a", None, [user("one")])
    scans = Scans(journal._db, pause=True)
    monkeypatch.setattr(journal, "_db", scans)
    reading = asyncio.create_task(journal.last(t, 20))
    await scans.read.wait()
    journal._commits.write_timeout_s = 0
    with pytest.raises(JournalUnavailable):
        await journal.append(t, "a", None, [user("lost?")])
    journal._commits.write_timeout_s = 30
    await journal.append(thread("t2"), "a", None, [user("other")])  # t's failed row is durable now
    scans.release.set()
    assert contents(await reading) == ["one"]
    assert len(journal._commits.windows) == 0
    scans.pause = False
    assert contents(await journal.last(t, 20)) == ["one", "lost?"]
    assert contents(await journal.last(t, 20)) == ["one", "lost?"]
    assert scans.count == 2


async def test_a_scan_begun_while_a_failed_group_may_become_durable_is_not_kept(
    journal: SlateJournal, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = thread()
    await journal.append(t, "a", None, [user("one")])
    journal._commits.write_timeout_s = 0
    with pytest.raises(JournalUnavailable):
        await journal.append(t, "a", None, [user("lost?")])
    journal._commits.write_timeout_s = 30
    scans = Scans(journal._db, pause=True)
    monkeypatch.setattr(journal, "_db", scans)
    reading = asyncio.create_task(journal.last(t, 20))  # it may or may not see "lost?"
    await scans.read.wait()
    await journal.append(thread("t2"), "a", None, [user("other")])
    scans.release.set()
    await reading
    assert len(journal._commits.windows) == 0
    scans.pause = False
    assert contents(await journal.last(t, 20)) == ["one", "lost?"]
    assert len(journal._commits.windows) == 1


async def test_retried_appends_are_kept_once(journal: SlateJournal) -> None:
    t = thread()
    await journal.append(t, "a", None, [user("zero")])
    assert contents(await journal.last(t, 20)) == ["zero"]
    first = await journal.append(t, "a", None, [user("one", "m1"), user("two", "m2")])
    again = await journal.append(t, "a", None, [user("one", "m1")])
    together = await asyncio.gather(
        journal.append(t, "a", None, [user("two", "m2"), user("three", "m3")]),
        journal.append(t, "a", None, [user("three", "m3")]),
        journal.append(t, "a", None, [user("four", "m4")]),
        journal.append(t, "a", None, [user("four", "m4")]),
    )
    assert again == first[:1]
    assert together[0][1] == together[1][0]
    assert together[2] == together[3]
    assert contents(await journal.last(t, 20)) == ["zero", "one", "two", "three", "four"]
    assert await journal.last(t, 20) == await stored(journal, t)
    assert len(journal._commits.windows) == 1


async def test_closing_clears_the_windows(journal_url: str) -> None:
    journal = await SlateJournal.open(journal_url)
    await journal.append(thread(), "a", None, [user("one")])
    await journal.last(thread(), 20)
    assert len(journal._commits.windows) == 1
    await journal.close()
    assert len(journal._commits.windows) == 0
    with pytest.raises(JournalUnavailable):
        await journal.last(thread(), 20)
