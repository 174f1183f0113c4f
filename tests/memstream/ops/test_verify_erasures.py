"""`memstream verify`'s erasure check (`memstream.ops.verify_erasures`) over the fakes: a clean erasure
is not reported (nor is what the user wrote after it), the projection rows of its deleted threads,
a thread or memory entries of the user from before it, and erasures not completed are. On the real
node: tests/memstream/test_node_user_erasure.py."""

from __future__ import annotations

from datetime import timedelta

import pytest

from memstream.ops.verify_erasures import ErasureLeftover, ErasureStores, check_erasures
from processors.clickhouse_projection import row_of
from tests.core.user_erasure_setup import Setup
from tests.fakes.transcripts import InMemoryTranscriptStore

pytestmark = pytest.mark.unit


async def projected(setup: Setup) -> InMemoryTranscriptStore:
    store = InMemoryTranscriptStore()
    await store.insert([row_of(m) for m in await setup.journal.read_from_seq(0, 1000)])
    return store


def stores(setup: Setup) -> ErasureStores:
    return ErasureStores(setup.register, setup.deletions, setup.threads, setup.memory)


async def test_leftovers_of_an_erasure_are_reported_until_gone() -> None:
    setup = Setup()
    await setup.thread("t1", "ada", n=3)
    await setup.thread("t2", "bob")
    await setup.remember("ada", "ada.private")
    store = await projected(setup)
    record = await setup.erasure.erase_in("dev", "acme", "ada")
    check = stores(setup)
    # the projection has not applied the tombstone of t1 yet (its event is the processor's)
    assert await check_erasures(check, setup.journal, store, "dev", settle_s=0) == (
        [],
        [ErasureLeftover("acme", "ada", record.erasure_id, 0, 0, 0, 0, journal=0, projection=3)],
    )
    await store.delete_thread("dev", "acme", "t1", 3)
    assert await check_erasures(check, setup.journal, store, "dev", settle_s=0) == ([], [])

    # what the user writes after the erasure is theirs again, not a leftover
    await setup.thread("t9", "ada")
    await setup.remember("ada", "ada.later")
    assert await check_erasures(check, setup.journal, store, "dev", settle_s=0) == ([], [])

    # a thread and an entry of the user from before the erasure are leftovers
    old = record.requested_at - timedelta(hours=1)
    await setup.threads.upsert("dev", "acme", "t0", "bot", "ada", {})
    setup.threads.threads[("dev", "acme", "t0")] = setup.threads.threads[("dev", "acme", "t0")].model_copy(
        update={"created_at": old}
    )
    setup.now = old
    await setup.remember("ada", "ada.old")
    (left,) = (await check_erasures(check, setup.journal, store, "dev", settle_s=0))[1]
    assert (left.threads, left.private_entries, left.projection) == (1, 1, 0)
    assert await check_erasures(check, setup.journal, store, "prod", settle_s=0) == ([], [])


async def test_an_incomplete_erasure_is_reported_as_such() -> None:
    setup = Setup()
    await setup.thread("t1", "ada")
    record = await setup.register.open("dev", "acme", "ada")
    store = await projected(setup)
    assert await check_erasures(stores(setup), setup.journal, store, "dev", settle_s=0) == (
        [f"{record.erasure_id} acme/ada"],
        [],
    )
