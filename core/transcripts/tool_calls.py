"""Pairing the messages of a tool-call id into calls (pure; used by every `TranscriptStore`).

A tool-call id is not unique within a thread: some OpenAI-compatible servers number calls per
turn (`call_0` in every turn). A repeated id within a thread therefore means several calls, and
each call is addressed by the messages that carry it, never by the id alone.

Rule (`group_calls`), per thread in offset order: an `assistant` message carrying the id starts
a new call; a `tool` message carrying the id is the result of the current call when that call
has no result yet, else it starts a call of its own (with no call message: `call_offset` None).
Calls are numbered per thread from 1 in offset order (`ToolCallInfo.occurrence`), so a call's
number never changes when later calls with the same id are appended.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime

from core.stores.transcripts import ToolCallInfo


@dataclass(frozen=True)
class ToolCallMessage:
    """One message carrying a tool-call id: where it is and how large its parts are (bytes)."""

    thread_id: str
    offset: int
    role: str  # 'assistant' (the call) or 'tool' (the result); other roles are ignored
    tool_name: str | None
    arguments_bytes: int
    result_bytes: int
    created_at: datetime


def group_calls(tool_call_id: str, messages: Iterable[ToolCallMessage]) -> list[ToolCallInfo]:
    """The calls of `messages` (module doc: one entry per call), most recent first: by the time
    of their latest message, then thread id, then the later call of a thread first."""
    by_thread: dict[str, list[ToolCallMessage]] = {}
    for message in messages:
        if message.role in ("assistant", "tool"):
            by_thread.setdefault(message.thread_id, []).append(message)
    calls: list[tuple[datetime, ToolCallInfo]] = []
    for thread_id, thread_messages in by_thread.items():
        current: ToolCallInfo | None = None
        latest: datetime | None = None
        occurrence = 0
        for message in sorted(thread_messages, key=lambda m: m.offset):
            if message.role == "tool" and current is not None and current.result_offset is None:
                current = replace(
                    current,
                    tool_name=current.tool_name or message.tool_name,
                    result_offset=message.offset,
                    result_bytes=message.result_bytes,
                )
                latest = max(latest or message.created_at, message.created_at)
                continue
            if current is not None and latest is not None:
                calls.append((latest, current))
            occurrence += 1
            is_call = message.role == "assistant"
            current = ToolCallInfo(
                tool_call_id=tool_call_id,
                thread_id=thread_id,
                tool_name=message.tool_name,
                call_offset=message.offset if is_call else None,
                result_offset=None if is_call else message.offset,
                arguments_bytes=message.arguments_bytes if is_call else 0,
                result_bytes=0 if is_call else message.result_bytes,
                created_at=message.created_at,
                occurrence=occurrence,
            )
            latest = message.created_at
        if current is not None and latest is not None:
            calls.append((latest, current))
    calls.sort(key=lambda item: (item[1].thread_id, -item[1].occurrence))
    calls.sort(key=lambda item: item[0], reverse=True)
    return [call for _, call in calls]
