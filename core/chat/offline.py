"""The offline default `ChatModel`: no network, no weights, deterministic.

- `summarize`: the extractive summarizer of `core.chat.extractive` (whole sentences of the
  previous summary and the new messages, chosen by salience, within the token budget).
- `extract_facts`: the conservative rules of `core.chat.rules` (explicit self-statements
  and preferences in user messages only).
- `complete`: not supported (`ModelUnsupported`): free-form text needs a real model.

Usage is reported like a real model's: prompt tokens = the messages' journal token counts (+ the
previous summary's), completion tokens = o200k tokens of the output; `model` is "offline".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from core.chat.base import ChatMessage, Completion, FactsDraft, ModelUnsupported, SummaryDraft, Usage
from core.chat.extractive import OFFLINE_SUMMARY_VERSION, extractive_summary
from core.chat.rules import extract_user_facts
from core.journal.models import Message
from core.journal.tokens import count_tokens
from core.summaries.models import Summary

MODEL_ID = "offline"
OFFLINE_FACTS_VERSION = "offline-rules-1"


class OfflineChatModel:
    """`ChatModel` without a model (module doc). Stateless: share one instance freely."""

    @property
    def model_id(self) -> str:
        return MODEL_ID

    async def summarize(
        self, previous: Summary | None, messages: Sequence[Message], *, max_tokens: int
    ) -> SummaryDraft:
        if max_tokens < 1:
            raise ValueError("max_tokens must be >= 1")
        content = extractive_summary(previous.content if previous is not None else None, messages, max_tokens)
        tokens = count_tokens(content)
        prompt = sum(m.token_count for m in messages) + (previous.token_count if previous is not None else 0)
        usage = Usage(prompt_tokens=prompt, completion_tokens=tokens, model=MODEL_ID)
        return SummaryDraft(
            content=content, token_count=tokens, usage=usage, prompt_version=OFFLINE_SUMMARY_VERSION
        )

    async def extract_facts(self, messages: Sequence[Message]) -> FactsDraft:
        facts = extract_user_facts(messages)
        usage = Usage(
            prompt_tokens=sum(m.token_count for m in messages if m.role == "user"),
            completion_tokens=sum(count_tokens(f.content) for f in facts),
            model=MODEL_ID,
        )
        return FactsDraft(facts=tuple(facts), usage=usage, prompt_version=OFFLINE_FACTS_VERSION)

    async def complete(
        self,
        messages: Sequence[ChatMessage],
        *,
        response_format: dict[str, Any] | None = None,
        max_tokens: int | None = None,
    ) -> Completion:
        raise ModelUnsupported(
            "the offline chat model only summarizes and extracts facts; free-form completion needs a real "
            "model (set MEMSTREAM_CHAT_MODEL__PROVIDER=openai with __BASE_URL and __MODEL)"
        )

    async def close(self) -> None:
        return None
