"""A chat model that records its calls (unit tests of the journal tools; the in-memory transcript
store is `tests.fakes.transcripts.InMemoryTranscriptStore`)."""

from __future__ import annotations

from collections.abc import Sequence
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
from core.summaries.models import Summary


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
