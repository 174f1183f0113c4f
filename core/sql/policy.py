"""What a query may touch, checked on the engine's own parse of it before it runs.

The engine enforces read-only (`readonly = 1`: no INSERT, DDL, SET, SYSTEM, KILL, no table
function that reaches files, the network or other processes, no setting changed by the query) and
the tenancy row filters (`core.sql.limits`). This check refuses what read-only lets through and a
query must not do on a node that shares its process and files with the engine:

- a statement other than SELECT (with UNION, INTERSECT, EXCEPT, WITH), `DESCRIBE TABLE t`,
  `SHOW TABLES`, `SHOW DATABASES`, `EXISTS TABLE t`; `INTO OUTFILE` (read-only writes it anyway)
  and `SETTINGS` clauses (read-only refuses them: the message says to pass URL parameters);
- tables outside the projection's database (every table there is row-filtered) and the
  metadata tables in `SYSTEM_TABLES` (filtered to that database); a one-part name is a CTE or a
  table of that database (the session's only database);
- table functions but the generators in `TABLE_FUNCTIONS` (`merge()` would read around the row
  filters, `file()`, `url()`, `remote()`, `executable()`, ... reach outside);
- functions that read files, dictionaries, other tables by name, the server's secrets or a model
  provider (`DENIED_FUNCTIONS`; names compared without regard to case);
- `x IN db.table` naming a table outside the allowed ones.

The SELECT tree is ClickHouse's `parseQueryToJSON` of the query as `formatQuerySingleLine`
printed it (one statement: the engine refuses several); the other statements are matched whole on
that printed text.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from core.sql.errors import ACCESS_DENIED, NOT_IMPLEMENTED, READONLY, SqlError

SYSTEM_TABLES = frozenset(
    {
        "databases",
        "tables",
        "columns",
        "one",
        "numbers",
        "functions",
        "formats",
        "data_type_families",
        "time_zones",
        "table_functions",
        "settings",
    }
)
"""system tables a query may read (tables, columns and databases filtered to the projection's
database; the others describe the engine, not data)."""

TABLE_FUNCTIONS = frozenset(
    {"numbers", "numbers_mt", "zeros", "zeros_mt", "generate_series", "generateseries", "values", "view"}
)
"""Table functions a query may call (lower case): generators, and `view(SELECT ...)`, whose query
is checked like any other."""

DENIED_FUNCTIONS = frozenset(
    {
        "file",  # reads any file the node can
        "joinget",
        "joingetornull",
        "hascolumnintable",  # takes table names (and a host)
        "getserversetting",
        "getmergetreesetting",
        "getmacro",
        "showcertificate",
        "getclienthttpheader",
        "currentrequesturl",
        "generateserialid",  # writes to Keeper
        "logtrace",  # writes the node's log
        "filesystemavailable",
        "filesystemcapacity",
        "filesystemunreserved",
        "catboostevaluate",  # loads a model library from a path
        "addresstoline",
        "addresstolinewithinlines",
        "addresstosymbol",
        "demangle",
        "tid",
        "mergetreepartinfo",
        "ismergetreepartcoveredby",
        "zookeepersessionuptime",
        "aigenerate",  # the AI functions call a model provider
        "aiembed",
        "aifilter",
        "aiclassify",
        "aiextract",
        "airedact",
        "aisimilarity",
        "aitranslate",
    }
)
DENIED_PREFIXES = ("dict", "region")
"""Dictionary functions (`dictGet`, `dictHas`, ...) and the embedded dictionaries (`regionToName`, ...)."""

IN_FUNCTIONS = frozenset(
    {"in", "notin", "globalin", "globalnotin", "nullin", "notnullin", "globalnullin", "globalnotnullin"}
)

_IDENT = r"(?:[A-Za-z_][A-Za-z0-9_]*|`[^`\\\x00-\x1f]+`)"
_FORMAT_TAIL = rf"(?: FORMAT (?P<format>{_IDENT}))?"
_STATEMENTS = (
    re.compile(rf"(?:DESCRIBE|DESC) TABLE (?P<table>{_IDENT}(?:\.{_IDENT})?){_FORMAT_TAIL}"),
    re.compile(rf"EXISTS TABLE (?P<table>{_IDENT}(?:\.{_IDENT})?){_FORMAT_TAIL}"),
    re.compile(rf"SHOW TABLES(?: FROM (?P<database>{_IDENT}))?(?: (?:NOT )?I?LIKE '[^'\\]*')?{_FORMAT_TAIL}"),
    re.compile(rf"SHOW DATABASES(?: (?:NOT )?I?LIKE '[^'\\]*')?{_FORMAT_TAIL}"),
)


@dataclass(frozen=True)
class CheckedQuery:
    """A query that passed: the format its FORMAT clause names (None: none)."""

    format: str | None


def denied_function(name: str) -> bool:
    lower = name.lower()
    return lower in DENIED_FUNCTIONS or lower.startswith(DENIED_PREFIXES)


def is_select(formatted: str) -> bool:
    """Whether the printed query is a SELECT (the others are checked by `check_statement`)."""
    return formatted.startswith(("SELECT", "WITH", "("))


class _Check:
    def __init__(self, database: str) -> None:
        self.database = database
        self.ctes: set[str] = set()

    def table(self, parts: list[str]) -> None:
        if len(parts) == 1 and (parts[0] in self.ctes or "." not in parts[0]):
            return  # a CTE, or a table of the session's database (row-filtered)
        if len(parts) == 2:
            database, table = parts
            if database == self.database:
                return
            if database == "system" and table in SYSTEM_TABLES:
                return
        raise SqlError(
            ACCESS_DENIED,
            f"table {'.'.join(parts)} is not readable here: the SQL endpoint reads the database "
            f"{self.database} (messages, messages_dedup, message_vectors) and the system tables "
            f"{', '.join(sorted(SYSTEM_TABLES))}",
        )


def _nodes(node: Any, key: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every dict node of the tree with the key it hangs under."""
    if isinstance(node, dict):
        yield key, node
        for child_key, child in node.items():
            yield from _nodes(child, child_key)
    elif isinstance(node, list):
        for child in node:
            yield from _nodes(child, key)


def _parts(node: dict[str, Any]) -> list[str]:
    parts = node.get("name_parts")
    return [str(p) for p in parts] if isinstance(parts, list) else [str(node.get("name", ""))]


def check_select(tree: dict[str, Any], database: str) -> CheckedQuery:
    """Check a SELECT's `parseQueryToJSON` tree; SqlError (ACCESS_DENIED, READONLY) when it may not run."""
    if tree.get("type") != "SelectWithUnionQuery":
        raise SqlError(
            NOT_IMPLEMENTED, f"{tree.get('type')} queries are not served: the SQL endpoint runs SELECT"
        )
    if "out_file" in tree:
        raise SqlError(READONLY, "INTO OUTFILE is not allowed: the SQL endpoint only returns results")
    check = _Check(database)
    nodes = list(_nodes(tree))
    for _, node in nodes:
        if node.get("type") == "WithElement" and isinstance(node.get("name"), str):
            check.ctes.add(node["name"])
    for key, node in nodes:
        kind = node.get("type")
        if kind == "SetQuery":
            raise SqlError(
                READONLY,
                "a SETTINGS clause cannot change settings in readonly mode: pass allowed settings as URL "
                "parameters (e.g. ?max_execution_time=10)",
            )
        if kind == "TableIdentifier":
            check.table(_parts(node))
        elif kind == "Function":
            name = str(node.get("name", ""))
            if key == "table_function":
                if name.lower() not in TABLE_FUNCTIONS:
                    raise SqlError(
                        ACCESS_DENIED,
                        f"table function {name}() is not allowed here; allowed: "
                        + ", ".join(sorted(TABLE_FUNCTIONS)),
                    )
            elif denied_function(name):
                raise SqlError(ACCESS_DENIED, f"function {name}() is not allowed on the SQL endpoint")
            if name.lower() in IN_FUNCTIONS:
                args = node.get("arguments", {}).get("children", [])
                if len(args) == 2 and isinstance(args[1], dict) and args[1].get("type") == "Identifier":
                    check.table(_parts(args[1]))
    fmt = tree.get("format_ast")
    return CheckedQuery(format=str(fmt["name"]) if isinstance(fmt, dict) and "name" in fmt else None)


def _unquote(ident: str) -> str:
    return ident[1:-1] if ident.startswith("`") else ident


def check_statement(formatted: str, database: str) -> CheckedQuery:
    """Check a statement other than SELECT as `formatQuerySingleLine` printed it."""
    for pattern in _STATEMENTS:
        match = pattern.fullmatch(formatted)
        if match is None:
            continue
        groups = match.groupdict()
        if groups.get("table"):
            table = groups["table"]
            parts = re.findall(_IDENT, table)
            _Check(database).table([_unquote(p) for p in parts])
        if groups.get("database") and _unquote(groups["database"]) not in (database, "system"):
            raise SqlError(
                ACCESS_DENIED, f"database {_unquote(groups['database'])} is not readable here: use {database}"
            )
        fmt = groups.get("format")
        return CheckedQuery(format=_unquote(fmt) if fmt else None)
    verb = formatted.split(" ", 1)[0].upper()
    if verb in {
        "INSERT",
        "CREATE",
        "DROP",
        "ALTER",
        "SET",
        "SYSTEM",
        "KILL",
        "TRUNCATE",
        "RENAME",
        "OPTIMIZE",
        "GRANT",
        "REVOKE",
        "DELETE",
        "UPDATE",
        "ATTACH",
        "DETACH",
        "EXCHANGE",
        "UNDROP",
        "BACKUP",
        "RESTORE",
        "USE",
    }:
        raise SqlError(READONLY, f"{verb} is not allowed: the SQL endpoint is read-only")
    raise SqlError(
        NOT_IMPLEMENTED,
        "this statement is not served: the SQL endpoint runs SELECT, DESCRIBE TABLE, SHOW TABLES, "
        "SHOW DATABASES and EXISTS TABLE",
    )
