"""A thread's rolling summary: the stored model and the reader, writer and cache interfaces.

The summarizer writes a thread's summaries to object storage (`SummaryWriter`): every version as
its own immutable object `summary_version_key(...)` and the latest as `summary.json` under
`summary_key(...)`; the context reader only reads (`SummaryReader`). The object store is the
authority: a reader adds no fallback of its own. A summary that exists but cannot be read or
parsed raises `SummaryUnavailable` (never silently dropped: the context would lose the
conversation's past).

Versions are optimistic: `SummaryWriter.write(..., expected_version=N)` succeeds only when the
stored version is N (None: no summary yet) and the new summary is version N + 1; otherwise it
raises `SummaryVersionConflict` and writes nothing. Two racing writers can never both win, and the
visible version never goes backwards. A durable high-water mark (`SummaryVersionFloor`, used by
`core.summaries.layered.MonotonicSummaryStore`) keeps that true when the summary objects are
lost: the next version then continues above the highest one ever written (`write(..., floor=)`).

A `SummaryCache` (Redis) holds only derived state: it may miss, never shows an older version than
it was last given, and never raises.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from core.errors import Conflict, MemstreamError
from core.journal.models import ThreadRef


class SummaryUnavailable(MemstreamError):
    """A summary exists but could not be read (storage error) or parsed (corrupt object)."""

    code = "summary_unavailable"


class SummaryVersionConflict(Conflict):
    """The write's version check failed: nothing was written.

    `current_version` is the stored version seen by the check (None: no summary exists). The
    caller re-reads the current summary (`SummaryWriter.current`) and decides whether its work is
    still needed; it never retries the same write blindly.
    """

    code = "summary_version_conflict"

    def __init__(self, message: str, *, current_version: int | None) -> None:
        super().__init__(message)
        self.current_version = current_version


class SummaryWriteFailed(MemstreamError):
    """The object store failed during a write (after retries). The write may or may not have taken
    effect: re-read `SummaryWriter.current` before trying again."""

    code = "summary_write_failed"


class Summary(BaseModel):
    """The content of `summary.json`. Unknown extra fields are ignored (newer writers)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    version: int = Field(ge=1, description="increases by one with every rewrite of the summary")
    timestamp: datetime = Field(description="when this version was written")
    last_message_offset: int = Field(ge=0, description="offset of the last message the summary covers")
    last_message_id: str
    content: str
    token_count: int = Field(ge=0)
    message_count: int = Field(ge=0, description="messages folded into the summary so far")


def summary_folder(environment: str, account_id: str, agent_id: str, thread_id: str) -> str:
    """Where a thread's summary objects live, relative to the object store's root. The environment
    comes first: environments sharing one object store never see each other's summaries."""
    return f"{environment}/accounts/{account_id}/agents/{agent_id}/threads/{thread_id}"


def summary_key(environment: str, account_id: str, agent_id: str, thread_id: str) -> str:
    """The object key of a thread's summary, relative to the object store's root."""
    return f"{summary_folder(environment, account_id, agent_id, thread_id)}/summary.json"


def summary_version_key(
    environment: str, account_id: str, agent_id: str, thread_id: str, version: int
) -> str:
    """The immutable object holding one version of a thread's summary (next to `summary.json`)."""
    return f"{summary_folder(environment, account_id, agent_id, thread_id)}/summary.v{version}.json"


def summarization_lock_name(thread: ThreadRef, agent_id: str) -> str:
    """The name of the lock a summarizer holds (with a lease) while it summarizes a thread."""
    return f"summarize/{thread.environment}/{thread.account_id}/{agent_id}/{thread.thread_id}"


def parse_summary(raw: bytes, key: str) -> Summary:
    """Parse a stored summary; SummaryUnavailable naming the key when it is not valid."""
    try:
        return Summary.model_validate_json(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(root)'}: {err['msg']}" for err in exc.errors()
        )
        raise SummaryUnavailable(f"summary object {key} is corrupt: {problems}") from None


class SummaryReader(Protocol):
    async def read(self, thread: ThreadRef, agent_id: str) -> Summary | None:
        """The thread's current summary, or None when none was written yet.

        Raises SummaryUnavailable when one exists but cannot be read.
        """
        ...


def in_force_then(summary: Summary, last_offset: int, written_before: datetime | None) -> bool:
    """Whether `summary` could be the one a context showed when the thread's last message had
    offset `last_offset` and its next one was appended at `written_before` (None: no next message
    yet): it covers no later message and was written before that next message. Versions are
    written in order, so this holds for every version up to some N and for none after. Pure."""
    if summary.last_message_offset > last_offset:
        return False
    return written_before is None or summary.timestamp < written_before


@runtime_checkable
class SummaryHistory(Protocol):
    async def as_of(
        self, thread: ThreadRef, agent_id: str, *, last_offset: int, written_before: datetime | None
    ) -> Summary | None:
        """The highest version `in_force_then(version, last_offset, written_before)` holds for
        (None when no version does): the summary a context showed at that point of the thread.

        Raises SummaryUnavailable when the versions cannot be read.
        """
        ...


class SummaryWriter(Protocol):
    async def current(self, thread: ThreadRef, agent_id: str) -> Summary | None:
        """The thread's latest summary as the store decides it (the highest version written), or
        None. The starting point of a summarizer: write the next one with
        `expected_version=current.version` (None when there is none).

        Raises SummaryUnavailable when it cannot be read.
        """
        ...

    async def write(
        self,
        thread: ThreadRef,
        agent_id: str,
        new: Summary,
        *,
        expected_version: int | None,
        floor: int = 0,
    ) -> Summary:
        """Store `new` as the thread's next summary; returns it once it is durable and visible to
        readers.

        `expected_version=None` requires that no summary exists; otherwise the stored version must
        equal `expected_version`. `new.version` must be `max(expected_version or 0, floor) + 1`:
        the next version, where `floor` (0 as a rule) is the highest version ever written as a
        `SummaryVersionFloor` remembers it, so that a store that lost its objects continues above
        them instead of reusing their numbers. Anything else raises SummaryVersionConflict and
        writes nothing. Of writers racing with the same `expected_version`, exactly one succeeds.
        Re-sending the exact same `new` after an unknown outcome succeeds again (idempotent).
        Raises SummaryWriteFailed when the store fails.
        """
        ...


class SummaryStore(SummaryReader, SummaryWriter, Protocol):
    """Reads and writes (the summarizer's view of the store)."""


class SummaryVersionFloor(Protocol):
    """A durable high-water mark of each thread's summary version (Postgres), kept apart from the
    summary objects so that losing them (a deleted folder or bucket prefix) never lets a version
    number be reused or go backwards: the next summary continues above the mark."""

    async def highest(self, thread: ThreadRef, agent_id: str) -> int:
        """The highest version recorded for the thread (0 when none)."""
        ...

    async def record(self, thread: ThreadRef, agent_id: str, version: int) -> None:
        """Raise the mark to `version` (a lower or equal version changes nothing)."""
        ...


class SummaryCache(Protocol):
    """Derived, best-effort copies of summaries (Redis). No method raises: an unavailable cache is
    a miss on `get` and a deferred update on `put`."""

    async def get(self, thread: ThreadRef, agent_id: str) -> Summary | None:
        """The cached summary, or None on a miss (or when the cache is unavailable)."""
        ...

    async def put(self, thread: ThreadRef, agent_id: str, summary: Summary) -> None:
        """Cache `summary` unless the cache already holds the same or a newer version."""
        ...

    async def invalidate(self, thread: ThreadRef, agent_id: str) -> None:
        """Drop the cached summary (before a write: a writer that dies after its commit then leaves
        no stale entry behind)."""
        ...
