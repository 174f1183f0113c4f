"""What Grafana sends to ClickHouse for a dashboard query of the official ClickHouse data source
(grafana-clickhouse-datasource), so tests can run a dashboard's SQL on the real engine.

Two steps, in Grafana's order:
1. the browser (the plugin's `applyTemplateVariables`): `$__conditionalAll(condition, $var)` becomes
   `1=1` when `$var` is All (or nothing is selected), else `condition`; then Grafana's template
   service replaces the variables: `${var:sqlstring}` quotes every value ('...', a quote doubled)
   and joins them with commas; a bare `$var` or `${var}` is the value itself for one value and
   `'a','b'` for several (the plugin's format function);
2. the plugin's backend (pkg/macros): `$__timeFilter(col)` is `col >= toDateTime(FROM) AND col <=
   toDateTime(TO)` in whole Unix seconds, `$__fromTime`/`$__toTime` are `toDateTime(...)`,
   `$__fromTime_ms`/`$__toTime_ms` are `fromUnixTimestamp64Milli(...)` and `$__dateFilter(col)`
   compares with `toDate('YYYY-MM-DD')`.

A macro not emulated here raises, so a dashboard cannot use one this module would pass through.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

ALL = "$__all"
"""The value of a multi-value variable's "All" option."""

_VARIABLE_RE = re.compile(r"\$\{(\w+)(?::(\w+))?\}|\$(\w+)")


@dataclass(frozen=True)
class TimeRange:
    start: datetime
    end: datetime


def macro_calls(sql: str, name: str) -> list[tuple[int, int, list[str]]]:
    """Each `$__name(...)` in `sql`: (start, end after the closing parenthesis, the arguments split
    at top-level commas, untrimmed). Raises when the parentheses are unbalanced."""
    calls = []
    opener = f"$__{name}("
    at = sql.find(opener)
    while at != -1:
        depth, args, arg_start = 0, [], at + len(opener)
        for index in range(at + len(opener) - 1, len(sql)):
            char = sql[index]
            if char == "(":
                depth += 1
            elif char == ")":
                depth -= 1
                if depth == 0:
                    args.append(sql[arg_start:index])
                    calls.append((at, index + 1, args))
                    break
            elif char == "," and depth == 1:
                args.append(sql[arg_start:index])
                arg_start = index + 1
        else:
            raise ValueError(f"unbalanced parentheses after {opener!r} in {sql!r}")
        at = sql.find(opener, calls[-1][1])
    return calls


def _is_all(value: str | Sequence[str]) -> bool:
    values = [value] if isinstance(value, str) else list(value)
    return values in ([], [""], [ALL])


def conditional_all(sql: str, variables: Mapping[str, str | Sequence[str]]) -> str:
    """The plugin's `$__conditionalAll(condition, $var)`: `1=1` when `$var` is All, else `condition`."""
    for start, end, args in reversed(macro_calls(sql, "conditionalAll")):
        if len(args) != 2:
            raise ValueError(f"$__conditionalAll takes 2 arguments, got {args}")
        reference = re.search(r"(?<=\$\{)\w+(?=\})|(?<=\$)\w+", args[1].strip())
        if reference is None:
            raise ValueError(f"$__conditionalAll's second argument is not a variable: {args[1]!r}")
        phrase = "1=1" if _is_all(variables[reference.group(0)]) else args[0]
        sql = sql[:start] + phrase + sql[end:]
    return sql


def _sqlstring(values: Sequence[str]) -> str:
    return ",".join("'" + value.replace("'", "''") + "'" for value in values)


def replace_variables(sql: str, variables: Mapping[str, str | Sequence[str]]) -> str:
    """Grafana's template service with the plugin's format function; unknown names stay as they are
    (`$__timeFilter` is a macro for the backend, not a variable)."""

    def replace(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(3)
        if name not in variables:
            return match.group(0)
        value = variables[name]
        values = [value] if isinstance(value, str) else list(value)
        if ALL in values:  # Grafana would list every option: the dashboards here never rely on it
            raise ValueError(f"${name} is All outside $__conditionalAll")
        if match.group(2) == "sqlstring":
            return _sqlstring(values)
        if match.group(2) is not None:
            raise ValueError(f"variable format {match.group(2)!r} is not emulated")
        return value if isinstance(value, str) else _sqlstring(values)

    return _VARIABLE_RE.sub(replace, sql)


def _seconds(moment: datetime) -> int:
    return int(moment.timestamp())


def _value_macros(time_range: TimeRange) -> dict[str, str]:
    start, end = time_range.start, time_range.end
    return {
        "fromTime": f"toDateTime({_seconds(start)})",
        "toTime": f"toDateTime({_seconds(end)})",
        "fromTime_ms": f"fromUnixTimestamp64Milli({int(start.timestamp() * 1000)})",
        "toTime_ms": f"fromUnixTimestamp64Milli({int(end.timestamp() * 1000)})",
    }


def _column_macros(time_range: TimeRange, column: str) -> dict[str, str]:
    start, end = time_range.start, time_range.end
    first, last = _seconds(start), _seconds(end)
    return {
        "timeFilter": f"{column} >= toDateTime({first}) AND {column} <= toDateTime({last})",
        "dateFilter": f"{column} >= toDate('{start:%Y-%m-%d}') AND {column} <= toDate('{end:%Y-%m-%d}')",
    }


def backend_macros(sql: str, time_range: TimeRange) -> str:
    """The plugin backend's macros; any other `$__name` raises."""
    values = _value_macros(time_range)
    with_column = set(_column_macros(time_range, "c"))
    for match in re.finditer(r"\$__(\w+)", sql):
        if match.group(1) not in values.keys() | with_column:
            raise ValueError(f"macro $__{match.group(1)} is not emulated")
    for name in with_column:
        for start, end, args in reversed(macro_calls(sql, name)):
            if len(args) != 1:
                raise ValueError(f"$__{name} takes 1 argument, got {args}")
            sql = sql[:start] + _column_macros(time_range, args[0].strip())[name] + sql[end:]
    for name, value in values.items():
        sql = re.sub(rf"\$__{name}\b", value, sql)
    return sql


def expand(sql: str, variables: Mapping[str, str | Sequence[str]], time_range: TimeRange) -> str:
    """The SQL ClickHouse receives for the dashboard query `sql` (browser step, then backend)."""
    sent = backend_macros(replace_variables(conditional_all(sql, variables), variables), time_range)
    if "$" in sent:
        raise ValueError(f"unexpanded reference left in {sent!r}")
    return sent
