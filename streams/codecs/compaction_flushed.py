"""`compaction.flushed` (schema in topics.yaml): key `thread_id` as UTF-8 bytes, value the
`compaction.requested` value it answers, unchanged (unknown fields too), plus `flush`.

`decode` is what the summarizer needs and no stricter than it always was: the thread's scope and
offsets are declared and required (ids matched in full by `core.ids`, `from_offset` not after
`to_offset`); every other field (the rest of the request, `flush`) is kept as it is, unchecked.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from core.ids import Id
from streams.codecs.compaction_requested import CompactionRange, CompactionRequest
from streams.codecs.errors import InvalidEvent, first_error
from streams.codecs.records import EncodedEvent

TOPIC = "compaction.flushed"
SCHEMA_VERSION = 1

FlushStatus = Literal["stored", "skipped_no_memory", "failed"]


class FlushOutcome(BaseModel):
    """What the flush of one request did (the `flush` object)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    status: FlushStatus
    facts_stored: int = Field(default=0, ge=0)
    facts_rejected: int = Field(default=0, ge=0)
    error: str | None = None

    def payload(self) -> dict[str, Any]:
        """The JSON object (`error` only when there is one)."""
        return self.model_dump(mode="json", exclude_none=True)


class CompactionFlushed(CompactionRange):
    """A flushed compaction request (module doc): the declared fields are the thread's scope and
    offsets; the others (`schema_version`, `user_id`, ..., `flush`) are kept in `model_extra`."""

    environment: str = Field(min_length=1)
    account_id: Id
    agent_id: Id
    thread_id: Id

    @classmethod
    def of(cls, request: CompactionRequest, outcome: FlushOutcome) -> CompactionFlushed:
        """The record answering `request` (its fields unchanged, unknown ones too)."""
        return cls.model_validate({**request.payload(), "flush": outcome.payload()})


def encode(flushed: CompactionFlushed) -> EncodedEvent:
    """The record of `flushed` (key thread_id)."""
    return EncodedEvent(
        key=flushed.thread_id.encode("utf-8"), value=json.dumps(flushed.payload()).encode("utf-8"), headers=[]
    )


def decode(value: bytes | str | None) -> CompactionFlushed:
    """The flushed request of a record value; `InvalidEvent` when it is not one."""
    if value is None:
        raise InvalidEvent(f"{TOPIC} value is missing")
    try:
        return CompactionFlushed.model_validate_json(value)
    except ValidationError as exc:
        raise InvalidEvent(f"{TOPIC} value is invalid: {first_error(exc)}") from exc
