"""The windows of recently read threads (`sinks.slatedb.windows.ThreadWindows`) as a structure:
filled by reads, appended to and trimmed by commits, guarded against scans that raced a commit or
a failure, bounded by threads and bytes."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from core.journal.models import Message
from sinks.slatedb.windows import MESSAGE_OVERHEAD, WINDOW, ThreadKey, ThreadWindows

T1: ThreadKey = ("test", "acc1", "t1")
T2: ThreadKey = ("test", "acc1", "t2")


def message(offset: int, thread_id: str = "t1", seq: int | None = None) -> Message:
    return Message(
        message_id=f"{thread_id}-m{offset}",
        environment="test",
        account_id="acc1",
        agent_id="a",
        user_id=None,
        thread_id=thread_id,
        offset=offset,
        seq=seq if seq is not None else offset + 1,
        role="user",
        content="hello",
        created_at=datetime(2026, 12, 1, tzinfo=UTC),
        token_count=1,
    )


def rows(*offsets: int, thread_id: str = "t1", size: int = 10) -> list[tuple[Message, int]]:
    return [(message(o, thread_id), size) for o in offsets]


def offsets(messages: list[Message] | None) -> list[int] | None:
    return None if messages is None else [m.offset for m in messages]


def test_the_window_is_the_same_for_every_limit_up_to_its_size() -> None:
    windows = ThreadWindows(window=5)
    assert windows.get(T1, 5) is None
    assert windows.put(T1, windows.ticket(), rows(3, 4, 5, 6, 7))
    assert offsets(windows.get(T1, 5)) == [3, 4, 5, 6, 7]
    assert offsets(windows.get(T1, 2)) == [6, 7]
    assert offsets(windows.get(T1, 1)) == [7]
    returned = windows.get(T1, 5)
    assert returned is not None
    returned.clear()  # a caller's list is its own
    assert offsets(windows.get(T1, 5)) == [3, 4, 5, 6, 7]
    with pytest.raises(ValueError, match="at most 5 messages"):
        windows.put(T2, windows.ticket(), rows(0, 1, 2, 3, 4, 5, thread_id="t2"))


def test_a_short_thread_is_kept_whole_and_an_empty_one_too() -> None:
    windows = ThreadWindows(window=5)
    assert windows.put(T1, windows.ticket(), rows(0, 1))
    assert windows.put(T2, windows.ticket(), [])
    assert offsets(windows.get(T1, 5)) == [0, 1]
    assert windows.get(T2, 5) == []
    windows.add(rows(0, thread_id="t2"))
    assert offsets(windows.get(T2, 5)) == [0]


def test_commits_append_to_kept_threads_and_trim_to_the_window() -> None:
    windows = ThreadWindows(window=3)
    windows.put(T1, windows.ticket(), rows(0, 1))
    windows.add([(message(2, "t1"), 10), (message(0, "t9"), 10), (message(3, "t1"), 10)])
    assert offsets(windows.get(T1, 3)) == [1, 2, 3]
    assert windows.get(("test", "acc1", "t9"), 3) is None  # commits never fill a window
    windows.add(rows(4, 5, 6, 7))
    assert offsets(windows.get(T1, 3)) == [5, 6, 7]
    assert windows.charged_bytes == 3 * (10 + MESSAGE_OVERHEAD)


def test_a_commit_the_scan_already_saw_is_not_added_twice() -> None:
    windows = ThreadWindows(window=5)
    windows.put(T1, windows.ticket(), rows(0, 1, 2))  # the scan saw the commit of 1 and 2
    windows.add(rows(1, 2))
    windows.add(rows(3))
    assert offsets(windows.get(T1, 5)) == [0, 1, 2, 3]


def test_a_hole_in_the_offsets_drops_the_thread() -> None:
    windows = ThreadWindows(window=5)
    windows.put(T1, windows.ticket(), rows(0, 1))
    windows.put(T2, windows.ticket(), rows(0, thread_id="t2"))
    windows.add([*rows(3), *rows(1, thread_id="t2")])
    assert windows.get(T1, 5) is None
    assert offsets(windows.get(T2, 5)) == [0, 1]
    assert windows.charged_bytes == 2 * (10 + MESSAGE_OVERHEAD)


def test_a_scan_is_not_kept_when_a_commit_touched_its_thread_since_it_began() -> None:
    windows = ThreadWindows(window=5)
    ticket = windows.ticket()
    windows.add(rows(0, thread_id="t2"))  # another thread: the scan of t1 is still current
    assert windows.put(T1, ticket, rows(0, 1))
    windows.invalidate()
    windows.add([])
    ticket = windows.ticket()
    windows.add(rows(2))  # t1 is not kept: nothing to update, but the scan may have missed it
    assert not windows.put(T1, ticket, rows(0, 1))
    assert windows.get(T1, 5) is None
    assert windows.put(T1, windows.ticket(), rows(0, 1, 2))  # a scan begun after it is kept


def test_threads_whose_commit_generation_was_forgotten_count_as_touched_then() -> None:
    windows = ThreadWindows(window=5, max_touched=2)
    old = windows.ticket()
    windows.add(rows(0, thread_id="t1"))
    windows.add(rows(0, thread_id="t2"))
    windows.add(rows(0, thread_id="t3"))  # t1 (generation 1) is forgotten
    assert not windows.put(T1, old, rows(0))
    assert not windows.put(("test", "acc1", "t9"), old, [])  # unknown: maybe touched at 1
    recent = windows.ticket()
    assert windows.put(T1, recent, rows(0))
    assert windows.put(("test", "acc1", "t9"), recent, [])


def test_a_failure_clears_everything_and_no_scan_begun_before_the_next_commit_is_kept() -> None:
    windows = ThreadWindows(window=5)
    windows.put(T1, windows.ticket(), rows(0, 1))
    before = windows.ticket()
    windows.invalidate()
    assert len(windows) == 0
    assert windows.charged_bytes == 0
    assert windows.get(T1, 5) is None
    assert windows.ticket() is None  # uncertain: the failed group may become durable later
    assert not windows.put(T1, before, rows(0, 1))
    assert not windows.put(T1, None, rows(0, 1))
    windows.add([])  # a successful commit made everything before it durable
    assert not windows.put(T1, before, rows(0, 1))  # an earlier epoch
    assert windows.put(T1, windows.ticket(), rows(0, 1, 2))


def test_the_least_recently_read_thread_goes_first_past_the_thread_count() -> None:
    windows = ThreadWindows(window=5, max_threads=2)
    windows.put(T1, windows.ticket(), rows(0))
    windows.put(T2, windows.ticket(), rows(0, thread_id="t2"))
    windows.get(T1, 1)
    windows.add(rows(1, thread_id="t2"))  # commits do not count as reads
    windows.put(("test", "acc1", "t3"), windows.ticket(), rows(0, thread_id="t3"))
    assert windows.get(T2, 1) is None
    assert offsets(windows.get(T1, 1)) == [0]
    assert len(windows) == 2


def test_the_bytes_kept_are_bounded() -> None:
    per_message = 100 + MESSAGE_OVERHEAD
    windows = ThreadWindows(window=5, max_bytes=4 * per_message)
    windows.put(T1, windows.ticket(), rows(0, 1, size=100))
    windows.put(T2, windows.ticket(), rows(0, 1, size=100, thread_id="t2"))
    assert windows.charged_bytes == 4 * per_message
    windows.add(rows(2, size=100))  # t1 grows past the budget: t1 is the least recently read
    assert windows.get(T1, 5) is None
    assert offsets(windows.get(T2, 5)) == [0, 1]
    assert windows.charged_bytes == 2 * per_message
    assert not windows.put(T1, windows.ticket(), rows(0, 1, 2, 3, 4, size=100))  # alone too big
    assert len(windows) == 0
    assert windows.charged_bytes == 0


def test_the_window_is_the_largest_context_window() -> None:
    from core.threads import MAX_WINDOW_MESSAGES

    assert WINDOW == MAX_WINDOW_MESSAGES == 20
