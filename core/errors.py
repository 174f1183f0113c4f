"""Typed errors with one meaning each. The HTTP layer maps them to 4xx/5xx responses."""

from __future__ import annotations

from collections.abc import Iterator


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


class ThreadDeleted(NotFound):
    """The journal messages asked for were deleted with their thread (`DELETE /v1/threads/{id}`):
    waiting will not make them appear (a read-only journal view says so instead of timing out)."""

    code = "thread_deleted"


class Conflict(MemstreamError):
    """The request contradicts stored state (e.g. a message id reused with other content)."""

    code = "conflict"


class Unauthorized(MemstreamError):
    code = "unauthorized"


class Forbidden(MemstreamError):
    """The caller is authenticated but its key may not do this (e.g. an `mcp` key erasing a user)."""

    code = "forbidden"


class JournalFenced(MemstreamError):
    """Another journal writer opened the same journal: this writer must stop; every call fails."""

    code = "journal_fenced"


class JournalReadOnly(MemstreamError):
    """A write (append, cursor, listener) was asked of a read-only view of the journal (a process
    that follows the journal another process writes); nothing was written."""

    code = "journal_read_only"


class PostgresUnavailable(MemstreamError):
    """PostgreSQL cannot be reached right now (down, restarting, the connection broke); the call did
    not complete. `retry_after_s` says when to try again."""

    code = "postgres_unavailable"

    def __init__(self, message: str, *, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class StoreUnavailable(MemstreamError):
    """A store, broker or other resource cannot be used right now, and waiting cures it (connection
    refused, timeout, a server answering 503, a lock held elsewhere); the records are fine.

    The one outage signal: raised from a processor's batch (or from an error it was raised from),
    the runtime retries it without limit and never dead-letters it
    (`streams.runtime.outages.is_outage`). Subclasses name the store (`TranscriptUnavailable`,
    `streams.runtime.errors.SinkUnavailable`, ...) and may keep codes of their own.
    """

    code = "store_unavailable"


class DeletionIncomplete(StoreUnavailable):
    """A thread deletion stopped at a step (a store away, a crash): what was done is recorded, and
    the node at start, or the same DELETE again, finishes it (503 with Retry-After semantics)."""

    code = "deletion_incomplete"


class ErasureIncomplete(StoreUnavailable):
    """A user erasure stopped at a step (a store away, a crash, a thread that appends keep
    re-creating): what was done is recorded, and the node at start, or the same erasure again,
    finishes it (503)."""

    code = "erasure_incomplete"


class JournalUnavailable(MemstreamError):
    """The journal cannot be read or written right now (storage error); the call did not succeed."""

    code = "journal_unavailable"


class ShardNotLocal(StoreUnavailable):
    """The thread's journal shard (`core.sharding.shards.shard_of`) is not open in this process:
    another node owns it, or it is moving between nodes. Nothing was read or written; the owner
    serves the call (waiting cures it while the shard moves)."""

    code = "shard_not_local"

    def __init__(self, shard: int, message: str | None = None) -> None:
        super().__init__(message or f"journal shard {shard} is not open on this node")
        self.shard = shard


class JournalShardsMismatch(MemstreamError):
    """The journal shard count configured (`MEMSTREAM_JOURNAL_SHARDS`) is not the one the journal
    was created with, or a shard's journal holds another shard: nothing was opened for writing
    beyond the check. Resharding is not supported."""

    code = "journal_shards_mismatch"


def error_chain(exc: BaseException) -> Iterator[BaseException]:
    """`exc`, then what it was raised from: its `__cause__`, else its `__context__` unless that was
    suppressed (`raise ... from None`). Each error once (a cycle ends the walk)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        if current.__cause__ is not None:
            current = current.__cause__
        elif not current.__suppress_context__:
            current = current.__context__
        else:
            current = None
