"""The user-erasure register's contract (`core.stores.erasures.ErasureRegister`) on the in-memory fake
and Postgres: one incomplete erasure per user (per account and environment), thread deletions kept
once and in order, step reports, completion, and the listings of incomplete and completed ones."""

from __future__ import annotations

import asyncio

import pytest

from core.stores.erasures import ErasureRegister
from sinks.postgres.erasures import PostgresErasures
from tests.fakes.erasures import InMemoryErasures


@pytest.fixture(params=["memory", pytest.param("postgres", marks=pytest.mark.engine)])
def register(request: pytest.FixtureRequest) -> ErasureRegister:
    if request.param == "memory":
        return InMemoryErasures()
    return PostgresErasures(request.getfixturevalue("pool"))


async def test_open_returns_the_incomplete_erasure_until_it_completes(register: ErasureRegister) -> None:
    first = await register.open("dev", "acme", "u1")
    assert (first.deletions, dict(first.report), first.completed_at) == ((), {}, None)
    assert (await register.open("dev", "acme", "u1")).erasure_id == first.erasure_id
    others = [await register.open(*scope) for scope in (("dev", "other", "u1"), ("prod", "acme", "u1"))]
    other_user = await register.open("dev", "acme", "u2")
    assert len({first.erasure_id, other_user.erasure_id, *(o.erasure_id for o in others)}) == 4
    done = await register.complete(first.erasure_id)
    assert done.completed_at is not None and done.completed_at >= done.requested_at
    assert (await register.complete(first.erasure_id)).completed_at == done.completed_at
    again = await register.open("dev", "acme", "u1")
    assert again.erasure_id != first.erasure_id and again.completed_at is None
    assert await register.latest("dev", "acme", "u1") == again
    assert await register.latest("dev", "acme", "u3") is None
    assert [r.erasure_id for r in await register.incomplete()] == [
        *(o.erasure_id for o in others),
        other_user.erasure_id,
        again.erasure_id,
    ]
    assert [r.erasure_id for r in await register.completed("dev")] == [first.erasure_id]
    assert await register.completed("prod") == []


async def test_concurrent_opens_of_one_user_get_one_erasure(register: ErasureRegister) -> None:
    opened = await asyncio.gather(*(register.open("dev", "acme", "u1") for _ in range(8)))
    assert len({r.erasure_id for r in opened}) == 1


async def test_deletions_are_kept_once_in_order_and_steps_by_name(register: ErasureRegister) -> None:
    record = await register.open("dev", "acme", "u1")
    for deletion_id in (7, 3, 7, 9):
        stored = await register.add_deletion(record.erasure_id, deletion_id)
    assert stored.deletions == (7, 3, 9)
    stepped = await register.record_step(record.erasure_id, "threads", {"threads": 3, "ids": ["a", "b"]})
    stepped = await register.record_step(record.erasure_id, "memory", {"private_entries": 2})
    assert dict(stepped.report) == {
        "threads": {"threads": 3, "ids": ["a", "b"]},
        "memory": {"private_entries": 2},
    }
    assert stepped.deletions == (7, 3, 9)
    assert await register.get(record.erasure_id) == stepped
    assert await register.get(record.erasure_id + 1000) is None
    with pytest.raises(LookupError):
        await register.record_step(record.erasure_id + 1000, "memory", {})
