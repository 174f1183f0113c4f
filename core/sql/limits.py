"""The settings a query runs under: the node's limits, the settings a client may pass (lowering a
limit, shaping the output), the tenancy row filters, and read-only last so nothing can lift them.

Row filters use ClickHouse's `additional_table_filters`: the engine adds the filter to every read
of the table (in subqueries, joins, views such as `messages_dedup`, `IN` subqueries, with FINAL),
so an account-scoped key reads only its account's rows of every table of the projection's
database. A table there without `environment` and `account_id` columns gets the filter `0` (no
rows). The metadata tables show that database only.
"""

from __future__ import annotations

from collections.abc import Mapping

from core.sql.config import SqlSettings
from core.sql.errors import READONLY, SqlError
from core.sql.formats import Assembly, OutputFormat

TENANCY_COLUMNS = frozenset({"environment", "account_id"})

LOWERABLE = frozenset(
    {
        "max_execution_time",
        "max_memory_usage",
        "max_result_bytes",
        "max_result_rows",
        "max_rows_to_read",
        "max_bytes_to_read",
        "max_threads",
        "max_block_size",
    }
)
"""Limits a client may pass below the node's (a larger or 0 value is taken as the node's limit)."""

OUTPUT_SETTINGS = frozenset(
    {
        "date_time_output_format",
        "date_time_input_format",
        "output_format_json_quote_64bit_integers",
        "output_format_json_quote_64bit_floats",
        "output_format_json_quote_denormals",
        "output_format_json_named_tuples_as_objects",
        "output_format_decimal_trailing_zeros",
        "output_format_csv_crlf_end_of_line",
        "output_format_tsv_crlf_end_of_line",
        "format_csv_delimiter",
        "output_format_parquet_row_group_size",
        "output_format_parquet_compression_method",
        "output_format_parquet_string_as_string",
        "output_format_arrow_string_as_string",
        "output_format_pretty_max_rows",
        "output_format_pretty_color",
        "output_format_pretty_grid_charset",
        "output_format_native_write_json_as_string",
        "cast_string_to_dynamic_use_inference",
        "join_use_nulls",
        "extremes",
        "session_timezone",
        "use_client_time_zone",
    }
)
"""Settings that shape the output only; a client may set them."""

TRANSPORT_PARAMETERS = frozenset(
    {
        "query",
        "database",
        "default_format",
        "session_id",
        "session_timeout",
        "session_check",
        "query_id",
        "wait_end_of_query",
        "compress",
        "decompress",
        "enable_http_compression",
        "http_zlib_compression_level",
        "send_progress_in_http_headers",
        "http_headers_progress_interval_ms",
        "client_protocol_version",
        "buffer_size",
        "quota_key",
        "user",
        "add_http_cors_header",
        "http_native_compression_disable_checksumming_on_decompress",
    }
)
"""URL parameters of ClickHouse's HTTP interface that are not settings (read or ignored by the endpoint)."""


def _literal(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def table_filters(
    database: str, columns: Mapping[str, set[str]], environment: str, account_id: str | None
) -> dict[str, str]:
    """The row filter of every table of `database` (`columns`: table -> its column names) and of
    the metadata tables, for a key of `environment` and `account_id` (None: every account)."""
    tenant = f"environment = {_literal(environment)}"
    if account_id is not None:
        tenant += f" AND account_id = {_literal(account_id)}"
    filters = {
        f"{database}.{table}": tenant if TENANCY_COLUMNS <= names else "0" for table, names in columns.items()
    }
    filters["system.tables"] = f"database = {_literal(database)}"
    filters["system.columns"] = f"database = {_literal(database)}"
    filters["system.databases"] = f"name = {_literal(database)}"
    return filters


def filters_setting(filters: Mapping[str, str]) -> str:
    """`additional_table_filters` as ClickHouse reads it: a map literal of table -> filter."""
    return (
        "{"
        + ", ".join(f"{_literal(table)}: {_literal(expr)}" for table, expr in sorted(filters.items()))
        + "}"
    )


def _number(name: str, value: str) -> int:
    try:
        return int(float(value))
    except ValueError:
        raise SqlError(READONLY, f"setting {name} must be a number, not {value!r}") from None


def query_settings(
    limits: SqlSettings, fmt: OutputFormat, requested: Mapping[str, str], filters: Mapping[str, str]
) -> dict[str, str]:
    """The settings of one query, in the order they are applied: limits (lowered where the client
    asked), allowed output settings, the row filters, then `readonly = 1`. SqlError (READONLY) for
    a setting the client may not change, as a read-only ClickHouse user gets."""
    result_bytes = (
        limits.max_buffered_result_bytes if fmt.assembly is Assembly.WHOLE else limits.max_result_bytes
    )
    caps = {
        "max_execution_time": limits.max_execution_time_s,
        "max_memory_usage": limits.max_memory_usage,
        "max_result_bytes": result_bytes,
        "max_threads": limits.max_threads,
    }
    settings = {name: str(value) for name, value in caps.items()}
    settings["result_overflow_mode"] = "throw"
    settings["timeout_overflow_mode"] = "throw"
    for name, value in requested.items():
        if name in LOWERABLE:
            number = _number(name, value)
            cap = caps.get(name)
            if number > 0 and (cap is None or number < cap):
                settings[name] = str(number)
        elif name in OUTPUT_SETTINGS:
            settings[name] = value
        elif name == "readonly" and value in ("1", "2"):
            continue
        else:
            raise SqlError(
                READONLY,
                f"Cannot modify '{name}' setting in readonly mode: the SQL endpoint takes the limits "
                f"{', '.join(sorted(LOWERABLE))} (lowered only) and output settings such as "
                "date_time_output_format",
            )
    settings["additional_table_filters"] = filters_setting(filters)
    settings["readonly"] = "1"
    return settings
