"""The compaction ledger's contract (`core.stores.compactions.CompactionLedger`), on every store:
the in-memory fake and Postgres. Requests in flight (newer replaces older, settled once covered,
due again after a while), held-back crossings. What only Postgres does (the summary version mark
on the same row) is in `tests/sinks/postgres/test_compactions.py`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from core.stores.compactions import CompactionLedger, OpenCompaction
from core.stores.thresholds import ThreadScope
from sinks.postgres.compactions import PostgresCompactions
from tests.fakes.compactions import InMemoryCompactionLedger

A = ThreadScope("test", "acme", "bot", "th-1")
B = ThreadScope("test", "globex", "bot", "th-1")  # same thread id, other account


@pytest.fixture(params=["memory", pytest.param("postgres", marks=pytest.mark.engine)])
def ledger(request: pytest.FixtureRequest) -> CompactionLedger:
    """The ledger under test, empty."""
    if request.param == "memory":
        return InMemoryCompactionLedger()
    return PostgresCompactions(request.getfixturevalue("pool"))


def request(scope: ThreadScope, to_offset: int, from_offset: int = 0) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "environment": scope.environment,
        "account_id": scope.account_id,
        "agent_id": scope.agent_id,
        "user_id": None,
        "thread_id": scope.thread_id,
        "from_offset": from_offset,
        "to_offset": to_offset,
        "tokens": 100,
        "messages": to_offset - from_offset + 1,
        "reason": "messages",
        "requested_at": "2026-11-02T10:05:00Z",
    }


async def row(ledger: CompactionLedger, scope: ThreadScope) -> OpenCompaction:
    found = await ledger.get(scope)
    assert found is not None
    return found


async def test_a_request_is_in_flight_until_a_summary_covers_it(ledger: CompactionLedger) -> None:
    assert await ledger.get(A) is None
    await ledger.record_requests([(A, request(A, 49)), (B, request(B, 9))])
    open_ = await ledger.open_compactions(requested_before=None)
    assert {(o.scope, o.to_offset, o.rerequests) for o in open_} == {(A, 49, 0), (B, 9, 0)}
    assert (await row(ledger, A)).request == request(A, 49)

    await ledger.settle(A, 40)  # a summary that does not reach the request: still open
    assert (await row(ledger, A)).to_offset == 49
    await ledger.settle(A, 49)
    settled = await ledger.get(A)
    assert settled is not None and (settled.request, settled.to_offset, settled.requested_at) == (
        None,
        None,
        None,
    )
    assert [o.scope for o in await ledger.open_compactions(requested_before=None)] == [B]
    await ledger.settle(ThreadScope("test", "acme", "bot", "never"), 10)  # no record: nothing
    assert await ledger.get(ThreadScope("test", "acme", "bot", "never")) is None


async def test_a_newer_request_replaces_an_older_one_never_the_reverse(ledger: CompactionLedger) -> None:
    await ledger.record_requests([(A, request(A, 49))])
    await ledger.record_requests([(A, request(A, 99, from_offset=0))])
    await ledger.record_requests([(A, request(A, 49))])  # a late redelivery of the older one
    assert (await row(ledger, A)).to_offset == 99
    assert (await row(ledger, A)).request == request(A, 99)
    await ledger.settle(A, 49)  # the older compaction's summary leaves the newer request open
    assert (await row(ledger, A)).to_offset == 99


async def test_only_requests_open_long_enough_are_due_unless_everything_is_asked(
    ledger: CompactionLedger,
) -> None:
    await ledger.record_requests([(A, request(A, 49))])
    now = datetime.now(UTC)
    assert await ledger.open_compactions(requested_before=now - timedelta(seconds=60)) == []
    assert [o.scope for o in await ledger.open_compactions(requested_before=now + timedelta(seconds=1))] == [
        A
    ]
    await ledger.rerequested([(A, 49)])
    again = await ledger.get(A)
    assert again is not None and again.rerequests == 1
    assert again.requested_at is not None and again.requested_at >= now - timedelta(seconds=1)
    await ledger.rerequested([(A, 48)])  # not the request in flight: nothing changes
    assert (await row(ledger, A)).rerequests == 1
    await ledger.record_requests([(A, request(A, 60))])  # a new request starts counting afresh
    assert (await row(ledger, A)).rerequests == 0


async def test_held_back_crossings_wait_for_the_request_in_flight(ledger: CompactionLedger) -> None:
    await ledger.record_requests([(A, request(A, 49))])
    await ledger.record_crossings({A: 45})  # covered by the request in flight: ignored
    assert (await row(ledger, A)).crossed_offset is None
    await ledger.record_crossings({A: 80})
    await ledger.record_crossings({A: 70})  # the latest crossing is kept
    assert (await row(ledger, A)).crossed_offset == 80
    # while the request is in flight, the crossing is not due for re-evaluation
    due = await ledger.open_compactions(requested_before=datetime.now(UTC) - timedelta(seconds=60))
    assert due == []
    await ledger.settle(A, 49)
    (crossing,) = await ledger.open_compactions(requested_before=datetime.now(UTC) - timedelta(seconds=60))
    assert (crossing.scope, crossing.request, crossing.crossed_offset) == (A, None, 80)
    await ledger.forget_crossing(A, 79)  # an earlier re-evaluation: the later crossing stays
    assert (await row(ledger, A)).crossed_offset == 80
    await ledger.forget_crossing(A, 80)
    assert await ledger.open_compactions(requested_before=None) == []
    # a new request reaching the crossing covers it
    await ledger.record_crossings({B: 30})
    await ledger.record_requests([(B, request(B, 30))])
    assert (await row(ledger, B)).crossed_offset is None


async def test_a_summary_forgets_the_crossings_it_covers_only(ledger: CompactionLedger) -> None:
    await ledger.record_requests([(A, request(A, 49)), (B, request(B, 49))])
    await ledger.record_crossings({A: 60, B: 90})
    await ledger.settle(A, 70)
    await ledger.settle(B, 70)
    assert (await row(ledger, A)).crossed_offset is None
    assert (await row(ledger, B)).crossed_offset == 90


async def test_crossings_come_first_then_the_oldest_requests(ledger: CompactionLedger) -> None:
    scopes = [ThreadScope("test", "acme", "bot", f"th-{i}") for i in range(4)]
    for scope in scopes[:3]:
        await ledger.record_requests([(scope, request(scope, 10))])
    await ledger.record_crossings({scopes[3]: 5})  # no request in flight: due at once
    await ledger.rerequested([(scopes[0], 10)])  # requested again: now the newest
    due = await ledger.open_compactions(requested_before=None)
    assert [o.scope for o in due] == [scopes[3], scopes[1], scopes[2], scopes[0]]
    assert [o.scope for o in await ledger.open_compactions(requested_before=None, limit=2)] == [
        scopes[3],
        scopes[1],
    ]
