"""The journal's message model and its validation rules.

`NewMessage` is what a caller sends; `Message` is what the journal stores and publishes, with the
ids of its tenancy scope, its per-thread `offset`, the `seq` of its journal shard (relay order;
`shard`: `core.sharding.shards`), its
`created_at` (the time of the append, or the original time the caller gave: imports of earlier
conversations keep their times, while the order stays the journal's) and its exact o200k
`token_count`.

Validation is strict and specific: every rule raises a `ValueError` naming the rule, which the API
turns into a 422 with the field, and nothing is written. The rules for new input (`NewMessage`:
ids matched in full by `core.ids`, tool-call arguments within `core.inputs`) are stricter
than those for stored messages (`Message`, `ToolCall`), so that rows written under older rules
stay readable: a journal row that no longer parses would stop the relay at its seq.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime, timedelta
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from core.errors import InvalidInput
from core.ids import ID, ID_PATTERN, Id, StoredId, check_id
from core.inputs import MAX_JSON_DEPTH, JsonTooDeep, NumberOutOfRange, loads_json

__all__ = ["ID_PATTERN", "ROLES", "Id", "Message", "NewMessage", "Role", "ThreadRef", "ToolCall", "check_id"]

Role = Literal["system", "user", "assistant", "tool"]
ROLES: tuple[str, ...] = ("system", "user", "assistant", "tool")


class ToolCall(BaseModel):
    """A tool call (on an assistant message) or its result (on a tool message), as stored; a new
    one also passes `NewMessage`'s stricter rules."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: StoredId
    name: str | None = Field(default=None, min_length=1, max_length=256)
    arguments: str | None = Field(default=None, description="JSON-encoded arguments object")
    result: str | None = None

    @model_validator(mode="after")
    def _arguments_are_json(self) -> ToolCall:
        if self.arguments is not None:
            try:
                decoded = json.loads(self.arguments)
            except json.JSONDecodeError as exc:
                raise ValueError(f"tool_call.arguments is not valid JSON: {exc.msg}") from None
            except RecursionError:
                raise PydanticCustomError(
                    JsonTooDeep.code, f"tool_call.arguments nests deeper than {MAX_JSON_DEPTH} levels"
                ) from None
            except ValueError:
                raise PydanticCustomError(
                    NumberOutOfRange.code,
                    f"tool_call.arguments holds a number of more than {sys.get_int_max_str_digits()} digits",
                ) from None
            if not isinstance(decoded, dict):
                raise ValueError("tool_call.arguments must encode a JSON object")
        return self


EARLIEST_CREATED_AT = datetime(1970, 1, 1, tzinfo=UTC)
CREATED_AT_SKEW = timedelta(minutes=5)
"""How far ahead of the node's clock a given `created_at` may be (the caller's clock may differ)."""


class NewMessage(BaseModel):
    """A message as sent by a caller. `message_id` makes retries idempotent; give one.

    `created_at` is optional: the message's original time (history imported from elsewhere), with
    a time zone, from 1970 on and not after the node's clock plus `CREATED_AT_SKEW`; stored in UTC.
    Without it the message gets the time of its append."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    message_id: Id | None = None
    role: Role
    content: str = ""
    reasoning: str | None = None
    tool_call: ToolCall | None = None
    created_at: datetime | None = Field(
        default=None,
        description=(
            "the message's original time, with a time zone (e.g. 2024-05-01T10:00:00Z), for history "
            "imported from elsewhere; default: the time of the append. The order stays the journal's."
        ),
    )

    @field_validator("created_at")
    @classmethod
    def _original_time(cls, value: datetime | None) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError("created_at needs a time zone, e.g. 2024-05-01T10:00:00Z or +02:00")
        value = value.astimezone(UTC)
        if value < EARLIEST_CREATED_AT:
            raise ValueError("created_at must not be before 1970-01-01T00:00:00Z")
        latest = datetime.now(UTC) + CREATED_AT_SKEW
        if value > latest:
            raise ValueError(
                f"created_at {value.isoformat()} is in the future (the node's clock says "
                f"{datetime.now(UTC).isoformat(timespec='seconds')}); send the message's real time"
            )
        return value

    @field_validator("tool_call")
    @classmethod
    def _new_tool_call(cls, tool_call: ToolCall | None) -> ToolCall | None:
        """What a new tool call must be beyond a stored one: an id matched in full, and arguments
        within the input rules (nesting, text; `core.inputs`), with their specific codes."""
        if tool_call is None:
            return None
        problem = ID.problem(tool_call.id)
        if problem is not None:
            raise ValueError(f"tool_call.id {problem}")
        if tool_call.arguments is not None:
            try:
                loads_json(tool_call.arguments, "tool_call.arguments")
            except InvalidInput as exc:  # keeps its code (json_too_deep, invalid_text...)
                raise PydanticCustomError(exc.code, "{message}", {"message": exc.message}) from None
        return tool_call

    @model_validator(mode="after")
    def _role_rules(self) -> NewMessage:
        tc = self.tool_call
        if self.role in ("system", "user"):
            if tc is not None:
                raise ValueError(f"a {self.role} message cannot carry a tool_call")
            if self.reasoning is not None:
                raise ValueError(f"a {self.role} message cannot carry reasoning text")
            if not self.content:
                raise ValueError(f"a {self.role} message needs non-empty content")
        elif self.role == "assistant":
            if tc is not None:
                if tc.name is None or tc.arguments is None:
                    raise ValueError("an assistant tool_call needs both name and arguments")
                if tc.result is not None:
                    raise ValueError(
                        "an assistant tool_call cannot carry a result; send it as a tool message"
                    )
            elif not self.content:
                raise ValueError("an assistant message needs content or a tool_call")
        else:  # tool
            if tc is None:
                raise ValueError("a tool message needs a tool_call with its id and result")
            if tc.result is None:
                raise ValueError("a tool message needs tool_call.result")
            if self.reasoning is not None:
                raise ValueError("a tool message cannot carry reasoning text")
        return self


class ThreadRef(BaseModel):
    """The full tenancy scope of a thread: every journal read and write names one."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    environment: str
    account_id: Id
    thread_id: Id


class Message(BaseModel):
    """A durable journal entry, as stored and as published on the journal topic."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    message_id: StoredId
    environment: str
    account_id: StoredId
    agent_id: StoredId
    user_id: StoredId | None
    thread_id: StoredId
    offset: int = Field(ge=0, description="per-thread, 0-based, gap-free, increasing")
    seq: int = Field(ge=1, description="the append sequence of the message's journal shard (relay order)")
    role: Role
    content: str
    reasoning: str | None = None
    tool_call: ToolCall | None = None
    created_at: datetime
    token_count: int = Field(ge=0)
    shard: int = Field(
        default=0,
        ge=0,
        lt=256,  # core.sharding.shards.MAX_SHARDS (core.sharding imports this package)
        description="the journal shard that stores the thread (`seq` counts within it); 0 with one shard",
    )

    @property
    def thread(self) -> ThreadRef:
        return ThreadRef(environment=self.environment, account_id=self.account_id, thread_id=self.thread_id)

    def stored_json(self) -> bytes:
        """The JSON the journal stores and the topic carries: `shard` only when it is not 0, so that
        a deployment of one shard writes exactly what releases before shards wrote (and read)."""
        if self.shard == 0:
            return self.model_dump_json(exclude=_NO_SHARD).encode("utf-8")
        return self.model_dump_json().encode("utf-8")


_NO_SHARD = {"shard"}
