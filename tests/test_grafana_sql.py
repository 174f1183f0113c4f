"""tests/grafana_sql.py expands dashboard SQL as Grafana and the ClickHouse data source do."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tests.grafana_sql import ALL, TimeRange, conditional_all, expand, replace_variables

RANGE = TimeRange(datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 11, 2, 12, 30, 15, 900_000, tzinfo=UTC))


def test_conditional_all_drops_the_condition_only_for_all_or_nothing_selected() -> None:
    sql = "WHERE $__conditionalAll(agent_id IN (${agent:sqlstring}), $agent) AND x = 1"
    assert conditional_all(sql, {"agent": [ALL]}) == "WHERE 1=1 AND x = 1"
    assert conditional_all(sql, {"agent": []}) == "WHERE 1=1 AND x = 1"
    assert conditional_all(sql, {"agent": ["a"]}) == "WHERE agent_id IN (${agent:sqlstring}) AND x = 1"


def test_sqlstring_quotes_every_value_and_doubles_quotes() -> None:
    variables = {"account": "a' OR '1'='1", "agent": ["a", "b"]}
    assert (
        replace_variables("account_id = ${account:sqlstring}", variables) == "account_id = 'a'' OR ''1''=''1'"
    )
    assert replace_variables("agent_id IN (${agent:sqlstring})", variables) == "agent_id IN ('a','b')"
    assert replace_variables("$account / ${agent}", variables) == "a' OR '1'='1 / 'a','b'"
    assert replace_variables("$__timeFilter(t) $other", variables) == "$__timeFilter(t) $other"


def test_time_macros_are_whole_seconds_with_an_inclusive_end() -> None:
    sql = "$__timeFilter(created_at) AND $__fromTime < $__toTime AND $__toTime_ms > 0 AND $__dateFilter(d)"
    assert expand(sql, {}, RANGE) == (
        "created_at >= toDateTime(1793491200) AND created_at <= toDateTime(1793622615)"
        " AND toDateTime(1793491200) < toDateTime(1793622615)"
        " AND fromUnixTimestamp64Milli(1793622615900) > 0"
        " AND d >= toDate('2026-11-01') AND d <= toDate('2026-11-02')"
    )


@pytest.mark.parametrize(
    "sql",
    [
        "$__timeInterval(created_at)",  # a macro the module does not emulate
        "$__timeFilter",  # without its column
        "environment = $environment",  # a variable not given
        "agent_id IN (${agent:csv})",  # a format not emulated
        "agent_id IN (${agent:sqlstring})",  # All outside $__conditionalAll
    ],
)
def test_what_is_not_emulated_raises(sql: str) -> None:
    with pytest.raises(ValueError):
        expand(sql, {"agent": [ALL]}, RANGE)
