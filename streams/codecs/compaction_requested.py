"""`compaction.requested` (schema in topics.yaml): key `thread_id` as UTF-8 bytes, value the JSON of
a `CompactionRequest`.

`decode` accepts what the schema accepts, and more: fields the schema does not know are kept
(`extra="allow"`) and echoed by the flush into `compaction.flushed`. Patterns are matched as the
JSON schema matches them (`re.search`). `from_offset` must not be after `to_offset`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from core.journal.models import ThreadRef
from core.stores.thresholds import ThreadScope
from streams.codecs.errors import InvalidEvent, first_error
from streams.codecs.records import EncodedEvent

TOPIC = "compaction.requested"
SCHEMA_VERSION: Literal[1] = 1

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$")
_ENVIRONMENT = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")
_TIMESTAMP = re.compile(
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})$"
)


def _matching(pattern: re.Pattern[str], what: str) -> AfterValidator:
    def check(value: str) -> str:
        if pattern.search(value) is None:
            raise ValueError(f"{what} {value!r} does not match {pattern.pattern}")
        return value

    return AfterValidator(check)


WireId = Annotated[str, _matching(_ID, "id")]
WireEnvironment = Annotated[str, _matching(_ENVIRONMENT, "environment")]
WireTimestamp = Annotated[str, _matching(_TIMESTAMP, "timestamp")]


def timestamp(when: datetime) -> str:
    """`when` as the wire's timestamp (UTC, `Z`)."""
    return when.astimezone(UTC).isoformat().replace("+00:00", "Z")


class CompactionRange(BaseModel):
    """What both compaction topics name: an agent's messages `from_offset`..`to_offset` of a
    thread (`from_offset` not after `to_offset`). Unknown fields are kept. Each topic's model
    narrows the field types."""

    model_config = ConfigDict(extra="allow", frozen=True)

    environment: str
    account_id: str
    agent_id: str
    thread_id: str
    from_offset: int = Field(ge=0)
    to_offset: int = Field(ge=0)

    @model_validator(mode="after")
    def _ordered(self) -> CompactionRange:
        if self.from_offset > self.to_offset:
            raise ValueError(f"from_offset {self.from_offset} is after to_offset {self.to_offset}")
        return self

    @property
    def thread(self) -> ThreadRef:
        return ThreadRef(environment=self.environment, account_id=self.account_id, thread_id=self.thread_id)

    @property
    def scope(self) -> ThreadScope:
        return ThreadScope(self.environment, self.account_id, self.agent_id, self.thread_id)

    def payload(self) -> dict[str, Any]:
        """The JSON value (declared fields first, then the unknown ones as they came)."""
        return self.model_dump(mode="json")


class CompactionRequest(CompactionRange):
    """A thread crossed a threshold: flush and summarize its messages `from_offset`..`to_offset`
    (topics.yaml describes every field). Unknown fields are kept."""

    schema_version: Literal[1] = SCHEMA_VERSION
    environment: WireEnvironment
    account_id: WireId
    agent_id: WireId
    user_id: WireId | None
    thread_id: WireId
    tokens: int = Field(ge=0)
    messages: int = Field(ge=1)
    reason: Literal["tokens", "messages"]
    requested_at: WireTimestamp


def encode(request: CompactionRequest) -> EncodedEvent:
    """The record of `request` (key thread_id)."""
    return encode_recorded(request.thread_id, request.payload())


def encode_recorded(thread_id: str, value: Mapping[str, Any]) -> EncodedEvent:
    """The record of a value recorded earlier (the compaction ledger's copy), produced again as it is."""
    return EncodedEvent(
        key=thread_id.encode("utf-8"), value=json.dumps(dict(value)).encode("utf-8"), headers=[]
    )


def decode(value: bytes | str | None) -> CompactionRequest:
    """The request of a record value; `InvalidEvent` when it is not one."""
    if value is None:
        raise InvalidEvent(f"{TOPIC} value is missing")
    try:
        parsed = json.loads(value)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidEvent(f"{TOPIC} value is not JSON: {exc}") from exc
    try:
        return CompactionRequest.model_validate(parsed)
    except ValidationError as exc:
        raise InvalidEvent(f"{TOPIC} value is invalid: {first_error(exc)}") from exc
