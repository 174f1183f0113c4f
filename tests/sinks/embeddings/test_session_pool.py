"""The embedder's worker pool: priorities, errors, closing."""

from __future__ import annotations

import threading

import pytest

from sinks.embeddings.session_pool import BULK, INTERACTIVE, SessionPool

pytestmark = pytest.mark.unit


def test_interactive_pieces_go_before_queued_bulk_pieces() -> None:
    gate = threading.Event()
    pool = SessionPool(lambda: "session", 1)
    pool.ready()
    done: list[str] = []
    first = pool.submit(BULK, lambda s: gate.wait(5))  # occupies the only worker
    bulk = [pool.submit(BULK, lambda s, n=n: done.append(f"bulk{n}")) for n in range(3)]
    query = pool.submit(INTERACTIVE, lambda s: done.append("query") or s)
    gate.set()
    assert first.result(5) is True and query.result(5) == "session"
    for future in bulk:
        future.result(5)
    assert done == ["query", "bulk0", "bulk1", "bulk2"]
    pool.close()


def test_a_piece_that_raises_fails_its_future_only() -> None:
    pool = SessionPool(lambda: 2, 2)
    pool.ready()
    bad = pool.submit(BULK, lambda s: 1 / 0)
    good = pool.submit(BULK, lambda s: s * 21)
    with pytest.raises(ZeroDivisionError):
        bad.result(5)
    assert good.result(5) == 42
    pool.close()


def test_a_session_that_cannot_be_built_makes_ready_raise() -> None:
    def broken() -> object:
        raise RuntimeError("no model here")

    pool = SessionPool(broken, 2)
    with pytest.raises(RuntimeError, match="no model here"):
        pool.ready()
    pool.close()


def test_close_ends_the_workers_after_the_queued_work() -> None:
    pool = SessionPool(lambda: None, 2)
    pool.ready()
    futures = [pool.submit(BULK, lambda s, n=n: n) for n in range(10)]
    pool.close()
    assert [f.result(5) for f in futures] == list(range(10))
    assert pool.join(5)


def test_a_pool_whose_sessions_failed_still_closes() -> None:
    calls = iter([None, RuntimeError("second worker fails")])

    def factory() -> object:
        outcome = next(calls)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    pool = SessionPool(factory, 2)
    with pytest.raises(RuntimeError):
        pool.ready()
    pool.close()
    assert pool.join(5)
