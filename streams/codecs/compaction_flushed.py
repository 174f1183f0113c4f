"""`compaction.flushed` (schema in topics.yaml): key `thread_id` as UTF-8 bytes, value the
`compaction.requested` value it answers, unchanged (unknown fields too), plus `flush`.

`decode` is what the summarizer needs and no stricter than it always was: the thread's scope and
offsets are declared and required (ids matched in full by `core.ids`, `from_offset` not after
`to_offset`); every other field (the rest of the request, `flush`) is kept as it is, unchecked.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from core.ids import Id
from core.journal.models import ThreadRef
from core.stores.thresholds import ThreadScope
from streams.codecs.compaction_requested import CompactionRequest
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


class CompactionFlushed(BaseModel):
    """A flushed compaction request (module doc): the declared fields are the thread's scope and
    offsets; the others (`schema_version`, `user_id`, ..., `flush`) are kept in `model_extra`."""

    model_config = ConfigDict(extra="allow", frozen=True)

    environment: str = Field(min_length=1)
    account_id: Id
    agent_id: Id
    thread_id: Id
    from_offset: int = Field(ge=0)
    to_offset: int = Field(ge=0)

    @model_validator(mode="after")
    def _ordered(self) -> CompactionFlushed:
        if self.from_offset > self.to_offset:
            raise ValueError("from_offset > to_offset")
        return self

    @classmethod
    def of(cls, request: CompactionRequest, outcome: FlushOutcome) -> CompactionFlushed:
        """The record answering `request` (its fields unchanged, unknown ones too)."""
        return cls.model_validate({**request.payload(), "flush": outcome.payload()})

    @property
    def thread(self) -> ThreadRef:
        return ThreadRef(environment=self.environment, account_id=self.account_id, thread_id=self.thread_id)

    @property
    def scope(self) -> ThreadScope:
        return ThreadScope(self.environment, self.account_id, self.agent_id, self.thread_id)

    def payload(self) -> dict[str, Any]:
        """The JSON value (declared fields first, then the others as they came)."""
        return self.model_dump(mode="json")


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
