"""Output formats of the SQL endpoint: the format a query answers in, its content type, and how an
engine that writes each block of a result as a whole output of its own (chdb's streaming) is
turned into one well-formed stream (`Assembly`).

Names are ClickHouse's, matched without regard to case (`FORMAT jsoneachrow` works as it does in
ClickHouse); the canonical spelling is what the engine is asked for.
"""

from __future__ import annotations

from enum import Enum

DEFAULT_FORMAT = "TabSeparated"


class Assembly(Enum):
    """How per-block outputs of a format make one result."""

    CONCAT = "concat"
    """No header or footer: the blocks' outputs are concatenated (TSV, CSV, JSONEachRow, Native, ...)."""
    HEADER_LINES_1 = "header-lines-1"
    """One header line (names) before each block's rows: kept for the first block only."""
    HEADER_LINES_2 = "header-lines-2"
    """Two header lines (names, types) before each block's rows: kept for the first block only."""
    CSV_HEADER_1 = "csv-header-1"
    """One CSV header record (a quoted name may hold a newline): kept for the first block only."""
    CSV_HEADER_2 = "csv-header-2"
    """Two CSV header records: kept for the first block only."""
    BINARY_HEADER_1 = "binary-header-1"
    """RowBinaryWithNames: a varint count and that many names before each block's rows."""
    BINARY_HEADER_2 = "binary-header-2"
    """RowBinaryWithNamesAndTypes: the count, the names, then the types."""
    PARQUET = "parquet"
    """One Parquet file per block: their row groups are written into one file as they come."""
    WHOLE = "whole"
    """A global header and footer (JSON, XML, Arrow, Pretty, ...): the result is produced in one
    piece, so it is held whole (bounded by `SqlSettings.max_buffered_result_bytes`)."""


_FORMATS: dict[str, tuple[Assembly, str]] = {}


def _add(assembly: Assembly, content_type: str, *names: str) -> None:
    for name in names:
        _FORMATS[name.lower()] = (assembly, content_type)
        _CANONICAL[name.lower()] = name


_CANONICAL: dict[str, str] = {}
_TSV = "text/tab-separated-values; charset=UTF-8"
_CSV = "text/csv; charset=UTF-8"
_JSON = "application/json; charset=UTF-8"
_NDJSON = "application/x-ndjson; charset=UTF-8"
_BINARY = "application/octet-stream"
_TEXT = "text/plain; charset=UTF-8"

_add(Assembly.CONCAT, _TSV, "TabSeparated", "TSV", "TabSeparatedRaw", "TSVRaw", "Raw")
_add(
    Assembly.HEADER_LINES_1,
    _TSV,
    "TabSeparatedWithNames",
    "TSVWithNames",
    "TabSeparatedRawWithNames",
    "TSVRawWithNames",
)
_add(
    Assembly.HEADER_LINES_2,
    _TSV,
    "TabSeparatedWithNamesAndTypes",
    "TSVWithNamesAndTypes",
    "TabSeparatedRawWithNamesAndTypes",
    "TSVRawWithNamesAndTypes",
)
_add(Assembly.CONCAT, _CSV, "CSV")
_add(Assembly.CSV_HEADER_1, _CSV, "CSVWithNames")
_add(Assembly.CSV_HEADER_2, _CSV, "CSVWithNamesAndTypes")
_add(
    Assembly.CONCAT,
    _NDJSON,
    "JSONEachRow",
    "JSONLines",
    "NDJSON",
    "JSONStringsEachRow",
    "JSONCompactEachRow",
    "JSONCompactStringsEachRow",
)
_add(Assembly.HEADER_LINES_1, _NDJSON, "JSONCompactEachRowWithNames", "JSONCompactStringsEachRowWithNames")
_add(
    Assembly.HEADER_LINES_2,
    _NDJSON,
    "JSONCompactEachRowWithNamesAndTypes",
    "JSONCompactStringsEachRowWithNamesAndTypes",
)
_add(Assembly.CONCAT, _BINARY, "Native", "RowBinary")
_add(Assembly.BINARY_HEADER_1, _BINARY, "RowBinaryWithNames")
_add(Assembly.BINARY_HEADER_2, _BINARY, "RowBinaryWithNamesAndTypes")
_add(Assembly.CONCAT, _TEXT, "Values", "TSKV", "LineAsString")
_add(Assembly.PARQUET, "application/vnd.apache.parquet", "Parquet")
_add(
    Assembly.WHOLE,
    _JSON,
    "JSON",
    "JSONStrings",
    "JSONCompact",
    "JSONCompactStrings",
    "JSONColumns",
    "JSONCompactColumns",
    "JSONColumnsWithMetadata",
    "JSONObjectEachRow",
)
_add(Assembly.WHOLE, "application/vnd.apache.arrow.file", "Arrow")
_add(Assembly.WHOLE, "application/vnd.apache.arrow.stream", "ArrowStream")
_add(Assembly.WHOLE, _BINARY, "ORC", "Avro", "BSONEachRow", "MsgPack", "Npy")
_add(Assembly.WHOLE, "application/xml; charset=UTF-8", "XML")
_add(Assembly.WHOLE, "text/markdown; charset=UTF-8", "Markdown")
_add(
    Assembly.WHOLE,
    _TEXT,
    "Pretty",
    "PrettyCompact",
    "PrettyCompactMonoBlock",
    "PrettySpace",
    "PrettySpaceMonoBlock",
    "PrettyNoEscapes",
    "PrettyCompactNoEscapes",
    "PrettyMonoBlock",
    "PrettyNoEscapesMonoBlock",
    "PrettyCompactNoEscapesMonoBlock",
    "PrettySpaceNoEscapes",
    "PrettySpaceNoEscapesMonoBlock",
    "Vertical",
    "Null",
)


class OutputFormat:
    """A format the endpoint answers in: `name` as the engine spells it, how its blocks are
    assembled and its content type."""

    def __init__(self, name: str, assembly: Assembly, content_type: str) -> None:
        self.name = name
        self.assembly = assembly
        self.content_type = content_type

    def __repr__(self) -> str:
        return f"OutputFormat({self.name!r})"


def output_format(name: str) -> OutputFormat | None:
    """The output format called `name` (any case), or None when the endpoint does not answer in it."""
    known = _FORMATS.get(name.lower())
    if known is None:
        return None
    return OutputFormat(_CANONICAL[name.lower()], known[0], known[1])


def format_names() -> list[str]:
    """Every format the endpoint answers in, as ClickHouse spells them."""
    return sorted(_CANONICAL.values(), key=str.lower)
