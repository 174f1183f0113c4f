"""The supervisor's restart budget: at once, then a doubling backoff, and a bounded rate."""

from __future__ import annotations

import pytest

from memstream.embedded.restarts import RestartBudget, RestartsExhausted


def test_first_restart_is_immediate_then_backoff_doubles_up_to_the_cap() -> None:
    budget = RestartBudget(per_minute=10, max_delay_s=4.0)
    delays = [budget.next_delay(float(t)) for t in range(6)]
    assert delays == [0.0, 1.0, 2.0, 4.0, 4.0, 4.0]


def test_more_restarts_than_allowed_within_a_minute_are_refused() -> None:
    budget = RestartBudget(per_minute=3)
    for t in (0.0, 10.0, 20.0):
        budget.next_delay(t)
    with pytest.raises(RestartsExhausted) as raised:
        budget.next_delay(30.0)
    assert raised.value.count == 4


def test_restarts_older_than_a_minute_are_forgotten() -> None:
    budget = RestartBudget(per_minute=2)
    assert budget.next_delay(0.0) == 0.0
    assert budget.next_delay(10.0) == 1.0
    assert budget.next_delay(75.0) == 0.0  # both earlier ones are more than 60 s old
