"""`compare` (pure): defects vs messages the relay had not published yet."""

from core.stores.transcripts import ThreadCount
from memstream.ops.verify import JournalThread, ThreadDiff, compare, render_differences


def journal_thread(messages: int, unpublished: list[int] | None = None, shard: int = 0) -> JournalThread:
    return JournalThread(
        messages=messages, max_offset=messages - 1, unpublished=sorted(unpublished or []), shard=shard
    )


def projected(thread: str, messages: int, account: str = "acc") -> ThreadCount:
    return ThreadCount(
        environment="test", account_id=account, thread_id=thread, messages=messages, max_offset=messages - 1
    )


def test_equal_counts_are_clean() -> None:
    result = compare({("acc", "t1"): journal_thread(3)}, {("acc", "t1"): projected("t1", 3)}, cursors={0: 10})
    assert result.differences == ()
    assert result.pending_messages == 0


def test_every_kind_of_defect_is_reported() -> None:
    journal = {
        ("acc", "fewer"): journal_thread(5),
        ("acc", "missing"): journal_thread(2),
        ("acc", "more"): journal_thread(1),
    }
    projection = {
        ("acc", "fewer"): projected("fewer", 3),
        ("acc", "more"): projected("more", 4),
        ("acc", "ghost"): projected("ghost", 2),
    }
    result = compare(journal, projection, cursors={0: 100})
    assert set(result.differences) == {
        ThreadDiff("acc", "fewer", "fewer", 5, 3),
        ThreadDiff("acc", "missing", "missing_thread", 2, 0),
        ThreadDiff("acc", "more", "more", 1, 4),
        ThreadDiff("acc", "ghost", "unknown_thread", 0, 2),
    }
    lines = render_differences(result.differences)
    assert any("acc/ghost: in the projection only" in line for line in lines)


def test_unpublished_messages_are_pending_not_defects() -> None:
    # 4 messages, seqs 9 and 10 not yet published at cursor 8: the projection may hold 2..4
    journal = {("acc", "t"): journal_thread(4, unpublished=[9, 10])}
    result = compare(journal, {("acc", "t"): projected("t", 2)}, cursors={0: 8})
    assert result.differences == ()
    assert (result.pending_threads, result.pending_messages) == (1, 2)
    # the relay published seq 9 since: 2 projected messages is now one short of what must be there
    result = compare(journal, {("acc", "t"): projected("t", 2)}, cursors={0: 9})
    assert result.differences == (ThreadDiff("acc", "t", "fewer", 4, 2),)


def test_each_thread_is_pending_by_the_cursor_of_its_own_shard() -> None:
    # both threads have seqs 5 and 6 unpublished in their shards; shard 1's relay already published 6
    journal = {
        ("acc", "a"): journal_thread(6, unpublished=[5, 6], shard=0),
        ("acc", "b"): journal_thread(6, unpublished=[5, 6], shard=1),
    }
    projection = {("acc", "a"): projected("a", 4), ("acc", "b"): projected("b", 4)}
    result = compare(journal, projection, cursors={0: 4, 1: 6})
    assert result.differences == (ThreadDiff("acc", "b", "fewer", 6, 4),)
    assert (result.pending_threads, result.pending_messages) == (1, 2)


def test_same_thread_id_in_two_accounts_is_two_threads() -> None:
    journal = {("a1", "t"): journal_thread(2), ("a2", "t"): journal_thread(1)}
    projection = {("a1", "t"): projected("t", 2, "a1")}
    result = compare(journal, projection, cursors={0: 10})
    assert result.differences == (ThreadDiff("a2", "t", "missing_thread", 1, 0),)


def test_render_limits_lines() -> None:
    diffs = [ThreadDiff("acc", f"t{i}", "fewer", 2, 1) for i in range(5)]
    lines = render_differences(diffs, limit=2)
    assert len(lines) == 3
    assert lines[-1] == "  ... and 3 more"
