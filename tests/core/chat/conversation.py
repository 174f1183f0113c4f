"""Journal messages and summaries for model tests."""

from __future__ import annotations

from datetime import UTC, datetime

from core.journal.models import Message, Role, ToolCall
from core.journal.tokens import count_tokens
from core.summaries.models import Summary

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


def message(offset: int, role: Role, content: str, *, tool_call: ToolCall | None = None) -> Message:
    return Message(
        message_id=f"m{offset}",
        environment="test",
        account_id="acme",
        agent_id="helper",
        user_id="u1",
        thread_id="t1",
        offset=offset,
        seq=offset + 1,
        role=role,
        content=content,
        tool_call=tool_call,
        created_at=T0,
        token_count=count_tokens(content),
    )


def conversation(*turns: tuple[Role, str], start: int = 0) -> list[Message]:
    return [message(start + i, role, content) for i, (role, content) in enumerate(turns)]


def summary(content: str, *, last_offset: int = 9, version: int = 1) -> Summary:
    return Summary(
        version=version,
        timestamp=T0,
        last_message_offset=last_offset,
        last_message_id=f"m{last_offset}",
        content=content,
        token_count=count_tokens(content),
        message_count=last_offset + 1,
    )
