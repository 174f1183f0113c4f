"""Building `TranscriptRow`s for the transcript store tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from core.stores.transcripts import Role, TranscriptRow
from core.transcripts.terms import message_terms

BASE_TIME = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)


def row(
    thread_id: str,
    offset: int,
    content: str,
    *,
    role: Role = "user",
    environment: str = "test",
    account_id: str = "acct",
    agent_id: str = "agent",
    user_id: str | None = None,
    reasoning: str | None = None,
    tool_call_id: str | None = None,
    tool_name: str | None = None,
    tool_arguments: str | None = None,
    tool_result: str | None = None,
    created_at: datetime | None = None,
    seq: int | None = None,
) -> TranscriptRow:
    """A row of `thread_id` at `offset`; `created_at` defaults to BASE_TIME + offset minutes."""
    return TranscriptRow(
        environment=environment,
        account_id=account_id,
        agent_id=agent_id,
        user_id=user_id,
        thread_id=thread_id,
        message_id=f"{thread_id}-m{offset}",
        offset=offset,
        seq=seq if seq is not None else offset + 1,
        role=role,
        content=content,
        reasoning=reasoning,
        tool_call_id=tool_call_id,
        tool_name=tool_name,
        tool_arguments=tool_arguments,
        tool_result=tool_result,
        created_at=created_at if created_at is not None else BASE_TIME + timedelta(minutes=offset),
        token_count=len(content.split()),
        terms=message_terms(role, content),
    )


def tool_exchange(
    thread_id: str,
    ask: str,
    call_id: str,
    tool_name: str,
    arguments: str,
    result: str,
    *,
    user_id: str | None = None,
) -> list[TranscriptRow]:
    """Offsets 0-2 of `thread_id`: the user asks `ask`, the assistant calls `tool_name` with
    `arguments` (call `call_id`), the tool answers `result`."""
    return [
        row(thread_id, 0, ask, user_id=user_id),
        row(
            thread_id,
            1,
            "",
            role="assistant",
            user_id=user_id,
            tool_call_id=call_id,
            tool_name=tool_name,
            tool_arguments=arguments,
        ),
        row(thread_id, 2, "", role="tool", user_id=user_id, tool_call_id=call_id, tool_result=result),
    ]
