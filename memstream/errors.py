"""Typed errors with one meaning each. The HTTP layer maps them to 4xx/5xx responses."""

from __future__ import annotations


class MemstreamError(Exception):
    """Base class. `code` is a stable machine-readable identifier."""

    code = "error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidInput(MemstreamError):
    """Bad input from a caller: nothing was written. `field` names the offending field when known."""

    code = "invalid_input"

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class NotFound(MemstreamError):
    code = "not_found"


class Conflict(MemstreamError):
    """The request contradicts stored state (e.g. a message id reused with other content)."""

    code = "conflict"


class Unauthorized(MemstreamError):
    code = "unauthorized"


class JournalFenced(MemstreamError):
    """Another journal writer opened the same journal: this writer must stop; every call fails."""

    code = "journal_fenced"


class PostgresUnavailable(MemstreamError):
    """PostgreSQL cannot be reached right now (down, restarting, the connection broke); the call did
    not complete. `retry_after_s` says when to try again."""

    code = "postgres_unavailable"

    def __init__(self, message: str, *, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class JournalUnavailable(MemstreamError):
    """The journal cannot be read or written right now (storage error); the call did not succeed."""

    code = "journal_unavailable"
