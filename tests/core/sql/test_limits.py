"""The settings a query runs under: limits lowered only, output settings allowed, everything else
refused as a read-only ClickHouse user is, row filters for every table, readonly last."""

from __future__ import annotations

import pytest

from core.sql.config import SqlSettings
from core.sql.errors import READONLY, SqlError
from core.sql.formats import output_format
from core.sql.limits import filters_setting, query_settings, table_filters

LIMITS = SqlSettings(max_execution_time_s=30, max_memory_usage=2**30, max_result_bytes=2**30)
TSV = output_format("TSV")
JSON = output_format("JSON")


def test_limits_come_first_and_readonly_last() -> None:
    assert TSV is not None and JSON is not None
    settings = query_settings(LIMITS, TSV, {}, {"db.t": "0"})
    assert list(settings)[-2:] == ["additional_table_filters", "readonly"] and settings["readonly"] == "1"
    assert settings["max_execution_time"] == "30" and settings["result_overflow_mode"] == "throw"
    assert settings["max_result_bytes"] == str(2**30)
    assert query_settings(LIMITS, JSON, {}, {})["max_result_bytes"] == str(LIMITS.max_buffered_result_bytes)


@pytest.mark.parametrize(("asked", "applied"), [("5", "5"), ("3600", "30"), ("0", "30"), ("29.5", "29")])
def test_a_client_lowers_a_limit_never_raises_it(asked: str, applied: str) -> None:
    assert TSV is not None
    assert query_settings(LIMITS, TSV, {"max_execution_time": asked}, {})["max_execution_time"] == applied


def test_output_settings_pass_and_others_are_refused() -> None:
    assert TSV is not None
    settings = query_settings(LIMITS, TSV, {"date_time_output_format": "iso", "readonly": "1"}, {})
    assert settings["date_time_output_format"] == "iso" and settings["readonly"] == "1"
    for name, value in [
        ("readonly", "0"),
        ("allow_ddl", "1"),
        ("additional_table_filters", "{}"),
        ("format_schema", "x"),
    ]:
        with pytest.raises(SqlError) as caught:
            query_settings(LIMITS, TSV, {name: value}, {})
        assert caught.value.code == READONLY and f"Cannot modify '{name}'" in caught.value.message
    with pytest.raises(SqlError, match="must be a number"):
        query_settings(LIMITS, TSV, {"max_threads": "many"}, {})


def test_every_table_gets_a_filter_and_tables_without_tenancy_columns_none() -> None:
    columns = {"messages": {"environment", "account_id", "content"}, "instance": {"id", "created"}}
    one = table_filters("memstream", columns, "prod", "acme")
    assert one["memstream.messages"] == "environment = 'prod' AND account_id = 'acme'"
    assert one["memstream.instance"] == "0"
    assert (
        one["system.tables"] == "database = 'memstream'" and one["system.databases"] == "name = 'memstream'"
    )
    assert table_filters("memstream", columns, "prod", None)["memstream.messages"] == "environment = 'prod'"


def test_the_filters_setting_quotes_what_it_holds() -> None:
    assert filters_setting({"db.t": "a = 'x'", "db.a": "1"}) == "{'db.a': '1', 'db.t': 'a = \\'x\\''}"
