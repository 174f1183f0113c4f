"""Unit-test doubles: an in-memory transcript store (only what the journal tools read) and a chat
model that records its calls. Integration tests use the real chdb store instead."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from core.chat.base import (
    ChatMessage,
    Completion,
    FactsDraft,
    ModelUnavailable,
    SummaryDraft,
    Usage,
)
from core.journal.models import Message
from core.stores.transcripts import (
    MessageHit,
    ThreadCount,
    ToolCallInfo,
    ToolCallPart,
    TranscriptRow,
    TranscriptScope,
)
from core.summaries.models import Summary
from core.transcripts.tool_calls import ToolCallMessage, group_calls

_SPLIT = re.compile(r"[^0-9A-Za-z\u0080-\U0010ffff]+")


def _tokens(text: str) -> set[str]:
    return {t for t in _SPLIT.split(text.lower()) if t}


def _in_scope(row: TranscriptRow, scope: TranscriptScope) -> bool:
    return (row.environment, row.account_id, row.agent_id) == (
        scope.environment,
        scope.account_id,
        scope.agent_id,
    ) and (scope.user_id is None or row.user_id == scope.user_id)


@dataclass
class FakeTranscriptStore:
    """Token-overlap search over rows held in memory; every role is searchable unless
    `filter_roles` (to check the service's own guard)."""

    rows: list[TranscriptRow] = field(default_factory=list)
    filter_roles: bool = True
    searches: list[dict[str, Any]] = field(default_factory=list)
    reads: list[tuple[int, int]] = field(default_factory=list)

    async def ensure_schema(self) -> None:
        return None

    async def instance_id(self) -> str:
        return "fake"

    async def insert(self, rows: Sequence[TranscriptRow], *, table: str | None = None) -> None:
        self.rows.extend(rows)

    async def search(
        self, scope: TranscriptScope, query: str, *, thread_id: str | None = None, limit: int = 10
    ) -> list[MessageHit]:
        self.searches.append({"scope": scope, "query": query, "thread_id": thread_id, "limit": limit})
        wanted = _tokens(query)
        hits = []
        for row in self.rows:
            if not _in_scope(row, scope) or (thread_id is not None and row.thread_id != thread_id):
                continue
            if self.filter_roles and row.role not in ("user", "assistant"):
                continue
            score = len(wanted & _tokens(row.content))
            if score:
                hits.append(
                    MessageHit(
                        row.thread_id,
                        row.message_id,
                        row.offset,
                        row.role,
                        row.content,
                        row.created_at,
                        score,
                    )
                )
        hits.sort(key=lambda h: (-h.score, -h.created_at.timestamp(), h.thread_id, h.offset))
        return hits[:limit]

    def _calls(self, scope: TranscriptScope, tool_call_id: str) -> list[TranscriptRow]:
        return [r for r in self.rows if _in_scope(r, scope) and r.tool_call_id == tool_call_id]

    async def tool_call(
        self, scope: TranscriptScope, tool_call_id: str, *, thread_id: str | None = None
    ) -> list[ToolCallInfo]:
        return group_calls(
            tool_call_id,
            (
                ToolCallMessage(
                    thread_id=r.thread_id,
                    offset=r.offset,
                    role=r.role,
                    tool_name=r.tool_name,
                    arguments_bytes=len((r.tool_arguments or "").encode()),
                    result_bytes=len((r.tool_result or "").encode()),
                    created_at=r.created_at,
                )
                for r in self._calls(scope, tool_call_id)
                if thread_id is None or r.thread_id == thread_id
            ),
        )

    async def tool_call_bytes(
        self,
        scope: TranscriptScope,
        call: ToolCallInfo,
        part: ToolCallPart,
        offset: int,
        length: int,
    ) -> bytes:
        self.reads.append((offset, length))
        role, at = ("tool", call.result_offset) if part == "result" else ("assistant", call.call_offset)
        if at is None:
            raise ValueError(f"no {part} message")
        for row in self._calls(scope, call.tool_call_id):
            if (row.thread_id, row.offset, row.role) == (call.thread_id, at, role):
                text = (row.tool_result if part == "result" else row.tool_arguments) or ""
                return text.encode()[offset : offset + length]
        return b""

    async def thread_counts(self, environment: str, *, table: str | None = None) -> list[ThreadCount]:
        return []

    async def row_count(self, *, table: str | None = None) -> int:
        return len(self.rows)

    async def create_rebuild_table(self) -> str:
        return "rebuild"

    async def swap_in(self, table: str) -> None:
        return None

    async def drop_table(self, table: str) -> None:
        return None

    async def ping(self) -> None:
        return None

    async def close(self) -> None:
        return None


class RecordingModel:
    """A free-form chat model: answers `answer` (or raises for threads whose id appears in
    `fail_on`, matched in the prompt) and records every prompt."""

    def __init__(self, answer: str = "The user asked about refunds.", *, fail_on: Sequence[str] = ()) -> None:
        self.answer = answer
        self.fail_on = tuple(fail_on)
        self.prompts: list[list[ChatMessage]] = []

    @property
    def model_id(self) -> str:
        return "recording"

    async def complete(
        self,
        messages: Sequence[ChatMessage],
        *,
        response_format: dict[str, Any] | None = None,
        max_tokens: int | None = None,
    ) -> Completion:
        self.prompts.append(list(messages))
        if any(marker in messages[-1].content for marker in self.fail_on):
            raise ModelUnavailable("the endpoint kept failing")
        return Completion(
            text=self.answer, usage=Usage(prompt_tokens=10, completion_tokens=5, model="recording")
        )

    async def summarize(
        self, previous: Summary | None, messages: Sequence[Message], *, max_tokens: int
    ) -> SummaryDraft:
        raise AssertionError("a free-form model is asked to complete, not to summarize")

    async def extract_facts(self, messages: Sequence[Message]) -> FactsDraft:
        raise AssertionError("not used")

    async def close(self) -> None:
        return None
