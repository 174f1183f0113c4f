"""Unit tests of the fault suite's invariants (pure functions over what was read)."""

from __future__ import annotations

from faults.checks import (
    JournalRow,
    Window,
    check_journal,
    check_projection,
    check_rejections,
    check_server_errors,
    same_message,
)
from faults.compaction_checks import SummaryInfo, over_threshold, stranded_threads, versions_backwards
from faults.ledger import Conversation, Ledger, ServerError


def _ledger(thread: str, count: int) -> tuple[Ledger, list[dict[str, object]]]:
    ledger = Ledger()
    ledger.add_conversation(Conversation(thread, "agent-0", "user-0", hot=True))
    bodies = [
        {"message_id": f"{thread}.m{i}.0", "role": "user", "content": f"text {i}"} for i in range(count)
    ]
    for i, body in enumerate(bodies):
        ids = ledger.sending(thread, [body])
        ledger.acked(ids, [i])
    return ledger, bodies


def _rows(bodies: list[dict[str, object]], tokens: int = 10) -> list[JournalRow]:
    return [
        JournalRow(i, str(b["message_id"]), str(b["role"]), str(b["content"]), None, tokens)
        for i, b in enumerate(bodies)
    ]


def test_journal_with_every_acknowledged_append_once_passes() -> None:
    ledger, bodies = _ledger("t", 5)
    result = check_journal(ledger.view(), {"t": _rows(bodies)})
    assert result.ok, result.detail
    assert result.figures["acked"] == 5 and result.figures["lost"] == 0


def test_a_missing_acknowledged_append_is_lost() -> None:
    ledger, bodies = _ledger("t", 5)
    rows = _rows(bodies)[:4]
    result = check_journal(ledger.view(), {"t": rows})
    assert not result.ok
    assert result.figures["lost"] == 1
    assert "t.m4.0" in result.detail


def test_an_append_at_another_offset_or_with_other_content_counts_as_lost() -> None:
    ledger, bodies = _ledger("t", 3)
    rows = _rows(bodies)
    rows[2] = JournalRow(2, rows[2].message_id, "user", "changed", None, 10)
    result = check_journal(ledger.view(), {"t": rows})
    assert not result.ok and result.figures["lost"] == 1


def test_a_message_twice_and_a_gap_are_reported() -> None:
    ledger, bodies = _ledger("t", 3)
    rows = _rows(bodies)
    rows.append(JournalRow(4, rows[0].message_id, "user", "text 0", None, 10))
    result = check_journal(ledger.view(), {"t": rows})
    assert not result.ok
    assert result.figures["duplicated"] == 1
    assert "not 0..n-1" in result.detail


def test_unknown_outcomes_may_be_present_once_or_absent_but_nothing_unsent() -> None:
    ledger, bodies = _ledger("t", 2)
    ledger.sending("t", [{"message_id": "t.m2.0", "role": "user", "content": "text 2"}])  # never answered
    ledger.sending("t", [{"message_id": "t.m3.0", "role": "user", "content": "text 3"}])
    rows = [*_rows(bodies), JournalRow(2, "t.m2.0", "user", "text 2", None, 10)]
    result = check_journal(ledger.view(), {"t": rows})
    assert result.ok, result.detail
    assert result.figures["unknown_present"] == 1 and result.figures["unknown_absent"] == 1
    phantom = [*rows, JournalRow(3, "not-sent", "user", "x", None, 1)]
    assert not check_journal(ledger.view(), {"t": phantom}).ok


def test_a_rejected_append_must_not_be_stored_and_is_reported() -> None:
    ledger, bodies = _ledger("t", 1)
    ids = ledger.sending("t", [{"message_id": "t.m1.0", "role": "user", "content": "x"}])
    ledger.rejected(ids, "409 conflict: message id reused")
    assert not check_rejections(ledger.view(), since=0).ok
    stored = [*_rows(bodies), JournalRow(1, "t.m1.0", "user", "x", None, 1)]
    assert not check_journal(ledger.view(), {"t": stored}).ok


def test_tool_calls_compare_without_the_nulls_the_api_answers() -> None:
    body = {"message_id": "m", "role": "tool", "tool_call": {"id": "c1", "result": "{}"}}
    row = JournalRow(0, "m", "tool", "", {"id": "c1", "name": None, "arguments": None, "result": "{}"}, 3)
    assert same_message(body, row)
    assert not same_message({**body, "tool_call": {"id": "c1", "result": "{ }"}}, row)


def test_over_threshold_follows_the_thresholds_rule() -> None:
    _, bodies = _ledger("t", 60)
    few_tokens = _rows(bodies, tokens=5)
    assert over_threshold(few_tokens, -1) == 49  # the 50th message
    assert over_threshold(few_tokens, 49) is None  # 10 messages since the summary
    many_tokens = _rows(bodies, tokens=500)
    assert over_threshold(many_tokens, -1) == 3  # 2,000 tokens at the 4th message


def test_threads_over_the_thresholds_since_their_summary_are_stranded() -> None:
    _, bodies = _ledger("t", 60)
    journal = {"t": _rows(bodies, tokens=5)}
    assert "no summary" in stranded_threads(journal, {"t": None})["t"]
    assert stranded_threads(journal, {"t": SummaryInfo(1, 49, 0.0)}) == {}
    assert "after summary v1" in stranded_threads(journal, {"t": SummaryInfo(1, 5, 0.0)})["t"]
    assert "cannot be parsed" in stranded_threads(journal, {"t": SummaryInfo(-1, -1, 0.0)})["t"]
    short = {"t": _rows(bodies[:10], tokens=5)}
    assert stranded_threads(short, {"t": None}) == {}


def test_summary_versions_never_go_backwards() -> None:
    assert versions_backwards({"t": 2}, {"t": SummaryInfo(3, 10, 0.0)}) == []
    assert versions_backwards({"t": 2}, {"t": SummaryInfo(1, 10, 0.0)}) == ["t v2 -> v1"]
    assert versions_backwards({"t": 2}, {"t": None}) == ["t v2 -> v0"]


def test_server_errors_only_inside_outages_and_with_a_specific_code() -> None:
    window = Window(100.0, 110.0)
    fine = ServerError(105.0, "POST", "/v1/threads/t/messages", 503, "postgres_unavailable")
    assert check_server_errors([fine], [window]).ok
    outside = ServerError(120.0, "POST", "/v1/threads/t/messages", 503, "journal_fenced")
    assert not check_server_errors([outside], [window]).ok
    internal = ServerError(105.0, "POST", "/v1/threads/t/messages", 500, "internal_error")
    assert not check_server_errors([internal], [window]).ok
    no_code = ServerError(105.0, "POST", "/v1/threads/t/messages", 502, None)
    assert not check_server_errors([no_code], [window]).ok


def test_verify_ignores_only_the_threads_the_harness_put_on_the_topic_itself() -> None:
    poison = {"account_id": "default", "thread_id": "fz-poison\n", "kind": "unknown_thread"}
    report = {"ok": False, "pending_messages": 0, "differences": [{**poison, "journal": 0, "projection": 1}]}
    assert check_projection(report, {"fz-poison\n"}).ok
    assert not check_projection(report).ok
    fewer = {"account_id": "default", "thread_id": "t", "kind": "fewer", "journal": 3, "projection": 2}
    assert not check_projection({**report, "differences": [fewer]}, {"t"}).ok
    assert not check_projection({"ok": True, "pending_messages": 4, "differences": []}).ok
