"""Journal messages and `journal.messages` records for the clickhouse-projection tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from core.journal.models import Message, ToolCall
from streams.codecs import journal_messages
from streams.runtime.processor import Record

T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
TOPIC = "journal.messages"


def message(thread: str, offset: int, content: str, *, seq: int | None = None, **changes: Any) -> Message:
    """A user message of `thread` at `offset` (account acme, agent bot, environment test)."""
    fields: dict[str, Any] = {
        "message_id": f"{thread}-{offset}",
        "environment": "test",
        "account_id": "acme",
        "agent_id": "bot",
        "user_id": "alice",
        "thread_id": thread,
        "offset": offset,
        "seq": seq if seq is not None else offset + 1,
        "role": "user",
        "content": content,
        "created_at": T0 + timedelta(seconds=offset),
        "token_count": len(content.split()),
    }
    fields.update(changes)
    return Message(**fields)


def tool_result(thread: str, offset: int, call_id: str, result: str) -> Message:
    return message(thread, offset, "", role="tool", tool_call=ToolCall(id=call_id, result=result))


def record_of(msg: Message, offset: int, partition: int = 0) -> Record:
    encoded = journal_messages.encode(msg)
    return Record(
        topic=TOPIC,
        partition=partition,
        offset=offset,
        key=encoded.key,
        value=encoded.value,
        headers=tuple(
            (k, v if isinstance(v, bytes) or v is None else v.encode()) for k, v in encoded.headers
        ),
        timestamp_ms=None,
    )


def raw_record(key: bytes | None, value: bytes | None, offset: int) -> Record:
    return Record(
        topic=TOPIC, partition=0, offset=offset, key=key, value=value, headers=(), timestamp_ms=None
    )
