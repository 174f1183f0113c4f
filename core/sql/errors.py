"""Errors of the SQL endpoint in ClickHouse's terms: a numeric code, its name and a message, sent
as ClickHouse sends them (`Code: N. DB::Exception: ... (NAME)`, the code in the header
X-ClickHouse-Exception-Code), with the HTTP status ClickHouse gives that code."""

from __future__ import annotations

import re

SYNTAX_ERROR = 62
UNKNOWN_TABLE = 60
UNKNOWN_DATABASE = 81
UNKNOWN_FORMAT = 73
TIMEOUT_EXCEEDED = 159
READONLY = 164
TOO_MANY_SIMULTANEOUS_QUERIES = 202
MEMORY_LIMIT_EXCEEDED = 241
TOO_MANY_ROWS_OR_BYTES = 396
QUERY_IS_TOO_LARGE = 393
REQUIRED_PASSWORD = 194
ACCESS_DENIED = 497
AUTHENTICATION_FAILED = 516
BAD_ARGUMENTS = 36
NOT_IMPLEMENTED = 48
UNKNOWN_SETTING = 115
NETWORK_ERROR = 210

NAMES = {
    SYNTAX_ERROR: "SYNTAX_ERROR",
    UNKNOWN_TABLE: "UNKNOWN_TABLE",
    UNKNOWN_DATABASE: "UNKNOWN_DATABASE",
    UNKNOWN_FORMAT: "UNKNOWN_FORMAT",
    TIMEOUT_EXCEEDED: "TIMEOUT_EXCEEDED",
    READONLY: "READONLY",
    TOO_MANY_SIMULTANEOUS_QUERIES: "TOO_MANY_SIMULTANEOUS_QUERIES",
    MEMORY_LIMIT_EXCEEDED: "MEMORY_LIMIT_EXCEEDED",
    TOO_MANY_ROWS_OR_BYTES: "TOO_MANY_ROWS_OR_BYTES",
    QUERY_IS_TOO_LARGE: "QUERY_IS_TOO_LARGE",
    REQUIRED_PASSWORD: "REQUIRED_PASSWORD",
    ACCESS_DENIED: "ACCESS_DENIED",
    AUTHENTICATION_FAILED: "AUTHENTICATION_FAILED",
    BAD_ARGUMENTS: "BAD_ARGUMENTS",
    NOT_IMPLEMENTED: "NOT_IMPLEMENTED",
    UNKNOWN_SETTING: "UNKNOWN_SETTING",
    NETWORK_ERROR: "NETWORK_ERROR",
}

# ClickHouse's own mapping (src/Server/HTTP/exceptionCodeToHTTPStatus.cpp) for the codes a query
# meets, plus READONLY and the limits as 4xx (the query's own doing) and the node's queue as 503.
_BAD_REQUEST = frozenset(
    {6, 25, 26, 27, 38, 41, 42, 43, 44, 47, 53, 62, 69, 72, 117, 167, 168, 169, 170, 184, 36, 427}
)
_NOT_FOUND = frozenset({46, 50, 60, 63, 73, 81, 115, 111, 133, 47})
_STATUS = {
    REQUIRED_PASSWORD: 401,
    AUTHENTICATION_FAILED: 403,
    ACCESS_DENIED: 403,
    READONLY: 403,
    QUERY_IS_TOO_LARGE: 413,
    NOT_IMPLEMENTED: 501,
    TIMEOUT_EXCEEDED: 408,
    MEMORY_LIMIT_EXCEEDED: 400,
    TOO_MANY_ROWS_OR_BYTES: 400,
    158: 400,  # TOO_MANY_ROWS
    307: 400,  # TOO_MANY_BYTES
    160: 400,  # TOO_SLOW
    TOO_MANY_SIMULTANEOUS_QUERIES: 503,
    NETWORK_ERROR: 503,
}

_ENGINE_ERROR = re.compile(r"Code: (\d+)\. (?:DB::Exception: )?(.*)", re.DOTALL)
_NAME_SUFFIX = re.compile(r"\s*\(([A-Z_]+)\)(?: \(version [^)]*\))?\.?\s*$")


def http_status(code: int) -> int:
    """The HTTP status of an error with ClickHouse code `code`."""
    if code in _STATUS:
        return _STATUS[code]
    if code in _NOT_FOUND:
        return 404
    if code in _BAD_REQUEST:
        return 400
    return 500


class SqlError(Exception):
    """A query that cannot run or failed: `code` and `name` are ClickHouse's (`NAMES`), `message`
    says what is wrong and what to do."""

    def __init__(self, code: int, message: str, *, name: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.name = name or NAMES.get(code, "UNKNOWN_EXCEPTION")
        self.message = message

    @property
    def status(self) -> int:
        return http_status(self.code)

    def body(self) -> str:
        """The text ClickHouse sends for an exception (one line, newline-terminated)."""
        return f"Code: {self.code}. DB::Exception: {self.message}. ({self.name})\n"

    @classmethod
    def from_engine(cls, text: str) -> SqlError:
        """An engine error (`Code: N. DB::Exception: ... (NAME) (version ...)`, possibly wrapped
        by a client library) as a SqlError; code 1000 (POCO_EXCEPTION) when the text has no code."""
        start = text.find("Code: ")
        match = _ENGINE_ERROR.match(text[start:]) if start >= 0 else None
        if match is None:
            return cls(1000, text.strip() or "the engine failed", name="UNKNOWN_EXCEPTION")
        code, message = int(match[1]), match[2].strip()
        while message.startswith(f"Code: {code}. DB::Exception: "):  # chdb repeats the prefix
            message = message.removeprefix(f"Code: {code}. DB::Exception: ")
        name = None
        suffix = _NAME_SUFFIX.search(message)
        while suffix is not None:
            name = name or suffix[1]
            message = message[: suffix.start()].rstrip()
            suffix = _NAME_SUFFIX.search(message)
        return cls(code, message.rstrip("."), name=name)
