"""Unit tests of the load's ledger."""

from __future__ import annotations

import pytest

from faults.ledger import Ledger, ServerError


def test_outcomes_and_offsets_are_recorded_per_message() -> None:
    ledger = Ledger()
    ids = ledger.sending("t", [{"message_id": "a"}, {"message_id": "b"}])
    ledger.attempted(ids)
    ledger.attempted(ids)
    ledger.acked(ids, [0, 1])
    other = ledger.sending("t", [{"message_id": "c"}])
    ledger.rejected(other, "422 invalid_input")
    view = ledger.view()
    assert view.messages["a"].offset == 0 and view.messages["b"].offset == 1
    assert view.messages["a"].attempts == 2
    assert view.outcomes() == {"acked": 2, "rejected": 1}
    assert [s.message_id for s in view.of_thread("t")] == ["a", "b", "c"]


def test_a_message_id_is_sent_once_per_run() -> None:
    ledger = Ledger()
    ledger.sending("t", [{"message_id": "a"}])
    with pytest.raises(ValueError, match="already sent"):
        ledger.sending("u", [{"message_id": "a"}])


def test_an_ack_must_cover_every_message_of_the_append() -> None:
    ledger = Ledger()
    ids = ledger.sending("t", [{"message_id": "a"}, {"message_id": "b"}])
    with pytest.raises(ValueError, match="2 messages sent but 1"):
        ledger.acked(ids, [0])


def test_the_view_is_a_copy() -> None:
    ledger = Ledger()
    ledger.sending("t", [{"message_id": "a"}])
    view = ledger.view()
    ledger.server_error(ServerError(1.0, "POST", "/x", 503, "journal_unavailable"))
    ledger.transport_error()
    assert view.server_errors == () and view.transport_errors == 0
    assert ledger.view().transport_errors == 1 and view.messages["a"].outcome == "unknown"
