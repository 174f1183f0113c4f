"""`ShardedJournal` over in-memory shard journals: every thread call goes to its shard's journal,
a thread of a shard not local is refused before anything happens, shards are attached and
detached while serving, listeners follow them."""

from __future__ import annotations

import pytest

from core.errors import JournalFenced, ShardNotLocal
from core.journal.models import NewMessage, ThreadRef
from core.journal.reading import messages_between
from core.sharding.journal import ShardedFollower, ShardedJournal
from core.sharding.shards import shard_of
from tests.fakes.journal import InMemoryJournal

SHARDS = 3


def thread(name: str) -> ThreadRef:
    return ThreadRef(environment="test", account_id="acme", thread_id=name)


def threads_of_each_shard() -> dict[int, ThreadRef]:
    """One thread of every shard."""
    found: dict[int, ThreadRef] = {}
    i = 0
    while len(found) < SHARDS:
        ref = thread(f"t-{i}")
        found.setdefault(shard_of(ref.environment, ref.account_id, ref.thread_id, SHARDS), ref)
        i += 1
    return found


def say(text: str, message_id: str | None = None) -> list[NewMessage]:
    return [NewMessage(message_id=message_id, role="user", content=text)]


@pytest.fixture
def shards() -> dict[int, InMemoryJournal]:
    return {k: InMemoryJournal(shard=k) for k in range(SHARDS)}


async def test_every_thread_call_goes_to_the_journal_of_its_shard(shards: dict[int, InMemoryJournal]) -> None:
    journal = ShardedJournal(SHARDS, shards)
    for shard, ref in threads_of_each_shard().items():
        [written] = await journal.append(ref, "bot", None, say(f"hello {shard}", f"m-{shard}"))
        assert written.shard == shard and written.seq == 1  # each shard numbers its own seqs
        assert [m.thread_id for m in shards[shard].by_seq] == [ref.thread_id]
        assert await journal.last(ref, 5) == [written]
        assert await journal.after(ref, -1) == [written]
        assert await messages_between(journal, ref, after=-1, up_to=0) == [written]
        [again] = await journal.append(ref, "bot", None, say(f"hello {shard}", f"m-{shard}"))
        assert again == written  # an idempotent retry reaches the same shard
    deleted_shard, ref = next(iter(threads_of_each_shard().items()))
    deleted = await journal.delete_thread(ref)
    assert deleted.messages == 1 and shards[deleted_shard].by_seq == []
    assert journal.local() == shards and list(journal.local()) == [0, 1, 2]


async def test_a_thread_of_a_shard_not_open_here_is_refused_before_anything_happens(
    shards: dict[int, InMemoryJournal],
) -> None:
    of_shard = threads_of_each_shard()
    journal = ShardedJournal(SHARDS, {0: shards[0], 2: shards[2]})
    with pytest.raises(ShardNotLocal, match="journal shard 1, which is not open on this node") as refused:
        await journal.append(of_shard[1], "bot", None, say("hi"))
    assert refused.value.shard == 1 and refused.value.code == "shard_not_local"
    for call in (
        journal.last(of_shard[1], 1),
        journal.after(of_shard[1], -1),
        journal.delete_thread(of_shard[1]),
    ):
        with pytest.raises(ShardNotLocal):
            await call
    assert all(not s.by_seq for s in shards.values())
    await journal.append(of_shard[2], "bot", None, say("fine"))
    assert len(shards[2].by_seq) == 1


async def test_shards_are_attached_and_detached_while_serving(shards: dict[int, InMemoryJournal]) -> None:
    of_shard = threads_of_each_shard()
    woken: list[str] = []
    journal = ShardedJournal(SHARDS, {0: shards[0]})
    journal.add_append_listener(lambda: woken.append("listener"))
    await journal.append(of_shard[0], "bot", None, say("a"))
    assert woken == ["listener"]
    journal.attach(1, shards[1])  # a shard moving to this node gets the listeners too
    await journal.append(of_shard[1], "bot", None, say("b"))
    assert woken == ["listener"] * 2
    with pytest.raises(ValueError, match="already attached"):
        journal.attach(1, InMemoryJournal(shard=1))
    with pytest.raises(ValueError, match="not one of the 3 journal shards"):
        journal.attach(3, InMemoryJournal(shard=3))
    assert journal.detach(1) is shards[1]
    with pytest.raises(ShardNotLocal):
        await journal.append(of_shard[1], "bot", None, say("c"))
    with pytest.raises(ShardNotLocal):
        journal.detach(1)
    assert list(journal.local()) == [0]


async def test_ready_and_close_cover_every_local_shard(shards: dict[int, InMemoryJournal]) -> None:
    journal = ShardedJournal(SHARDS, shards)
    await journal.ready()
    shards[2].fence()
    with pytest.raises(JournalFenced):
        await journal.ready()
    await journal.close()
    assert journal.local() == {}
    assert all(s._closed for s in shards.values())


class LaggingJournal(InMemoryJournal):
    """A follower: `wait_visible` records what it was asked."""

    def __init__(self, shard: int) -> None:
        super().__init__(shard=shard)
        self.waited: list[tuple[str, int]] = []

    async def wait_visible(self, thread: ThreadRef, offset: int) -> None:
        self.waited.append((thread.thread_id, offset))


async def test_a_sharded_follower_waits_on_the_view_of_the_threads_shard() -> None:
    views = {k: LaggingJournal(k) for k in range(SHARDS)}
    journal = ShardedFollower(SHARDS, views)
    of_shard = threads_of_each_shard()
    assert await messages_between(journal, of_shard[2], after=-1, up_to=3) == []  # short: it waits
    assert views[2].waited == [(of_shard[2].thread_id, 3)]
    assert views[0].waited == views[1].waited == []
