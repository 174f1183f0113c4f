"""`journal.deletions` (schema in topics.yaml): key `environment/account_id/thread_id` as UTF-8 bytes,
value the JSON of a thread's tombstone (`core.stores.deletions.Tombstone`) with its deletion id and
the time it was requested.

`decode` is strict: anything the schema refuses raises `InvalidEvent` (or
`UnsupportedSchemaVersion`), and so does a key that is not the value's scope.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from core.ids import ENVIRONMENT, ID
from core.stores.deletions import Tombstone
from streams.codecs.compaction_requested import WireTimestamp, timestamp
from streams.codecs.errors import InvalidEvent, UnsupportedSchemaVersion, first_error
from streams.codecs.records import EncodedEvent

TOPIC = "journal.deletions"
SCHEMA_VERSION: Literal[1] = 1


class ThreadDeleted(BaseModel):
    """One record's value (topics.yaml `ThreadDeleted`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal[1] = SCHEMA_VERSION
    deletion_id: int = Field(ge=1)
    environment: str
    account_id: str
    thread_id: str
    up_to_seq: int = Field(ge=0)
    requested_at: WireTimestamp

    @property
    def tombstone(self) -> Tombstone:
        return Tombstone(self.environment, self.account_id, self.thread_id, self.up_to_seq)


def key_of(environment: str, account_id: str, thread_id: str) -> bytes:
    """The record key of a thread's tombstones."""
    return f"{environment}/{account_id}/{thread_id}".encode()


def encode(deletion_id: int, tombstone: Tombstone, requested_at: datetime) -> EncodedEvent:
    """The record of a deletion's tombstone."""
    event = ThreadDeleted(
        deletion_id=deletion_id,
        environment=tombstone.environment,
        account_id=tombstone.account_id,
        thread_id=tombstone.thread_id,
        up_to_seq=tombstone.up_to_seq,
        requested_at=timestamp(requested_at),
    )
    return EncodedEvent(
        key=key_of(*tombstone.scope), value=event.model_dump_json().encode("utf-8"), headers=[]
    )


def decode(key: bytes | None, value: bytes | str | None) -> ThreadDeleted:
    """The event of a record; `InvalidEvent` if it is not a valid version-1 one for its key."""
    if value is None:
        raise InvalidEvent(f"{TOPIC} record has no value (this topic has no null values)")
    try:
        parsed = json.loads(value)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidEvent(f"{TOPIC} record is not JSON: {exc}") from exc
    if not isinstance(parsed, dict):
        raise InvalidEvent(f"{TOPIC} record is not a JSON object")
    version = parsed.get("schema_version")
    if version != SCHEMA_VERSION:
        raise UnsupportedSchemaVersion(f"{TOPIC} schema_version {version!r} is not supported")
    try:
        event = ThreadDeleted.model_validate(parsed)
    except ValidationError as exc:
        raise InvalidEvent(f"{TOPIC} record is invalid: {first_error(exc)}") from exc
    if not (
        ENVIRONMENT.matches(event.environment)
        and ID.matches(event.account_id)
        and ID.matches(event.thread_id)
    ):
        raise InvalidEvent(f"{TOPIC} record names an invalid scope")
    if key is not None and key != key_of(event.environment, event.account_id, event.thread_id):
        raise InvalidEvent(f"{TOPIC} record key {key!r} is not the value's thread scope")
    return event
