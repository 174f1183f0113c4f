"""A thread's rolling summary: the stored model and the reader interface.

The summarizer (a later component) writes one `summary.json` per thread to object storage under
`summary_key(...)`; the context reader only reads it. The object is the authority: a reader adds
no fallback of its own. A summary that exists but cannot be read or parsed raises
`SummaryUnavailable` (never silently dropped: the context would lose the conversation's past).
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from memstream.errors import MemstreamError
from memstream.journal.models import ThreadRef


class SummaryUnavailable(MemstreamError):
    """A summary exists but could not be read (storage error) or parsed (corrupt object)."""

    code = "summary_unavailable"


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


def summary_key(account_id: str, agent_id: str, thread_id: str) -> str:
    """The object key of a thread's summary, relative to the object store's root."""
    return f"accounts/{account_id}/agents/{agent_id}/threads/{thread_id}/summary.json"


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
