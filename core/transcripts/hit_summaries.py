"""One summary of one thread's search hits, from the chat model (one call per thread).

A model that answers free-form (`ChatModel.complete`) gets the versioned prompt
`core.chat.prompts.SEARCH_SUMMARY_PROMPT_VERSION` (query and messages as escaped data
blocks). The offline default cannot complete free-form (`ModelUnsupported`): it summarizes the
matching messages with its extractive summarizer instead (`ChatModel.summarize`, whole sentences
of the messages, `offline-extractive-1`), so the offline default still gives a real summary; when
no sentence qualifies (the extractive summarizer needs two content words), the summary is the
labelled matching messages themselves (`User: ...`), cut to the budget. Once a model said it
cannot complete, later calls go straight to `summarize`.

An empty summary is a failure (`ModelOutputInvalid`), like any `ModelError`: the caller degrades
that thread to its matching messages.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from core.chat.base import ChatModel, ModelOutputInvalid, ModelUnsupported
from core.chat.extractive import LABELS
from core.chat.prompts import SEARCH_SUMMARY_PROMPT_VERSION, search_summary_request
from core.chat.text import fit_to_budget
from core.journal.models import Message
from core.journal.tokens import count_tokens
from core.stores.transcripts import MessageHit, TranscriptScope

DEFAULT_SUMMARY_TOKENS = 200


@dataclass(frozen=True)
class ThreadSummary:
    text: str
    prompt_version: str  # the prompt (or offline algorithm) that produced it


def hits_as_messages(scope: TranscriptScope, hits: Sequence[MessageHit]) -> list[Message]:
    """One thread's hits as journal messages in offset order (what the prompts render). `seq` is
    not known from a hit: it is set to offset + 1 (the prompts never show it)."""
    return [
        Message(
            message_id=hit.message_id,
            environment=scope.environment,
            account_id=scope.account_id,
            agent_id=scope.agent_id,
            user_id=scope.user_id,
            thread_id=hit.thread_id,
            offset=hit.offset,
            seq=hit.offset + 1,
            role=hit.role,
            content=hit.content,
            created_at=hit.created_at,
            token_count=count_tokens(hit.content),
        )
        for hit in sorted(hits, key=lambda h: h.offset)
    ]


class MatchSummarizer:
    """Summarizes one thread's matching messages with `model` (module doc). Safe to share
    between concurrent searches."""

    def __init__(self, model: ChatModel, *, max_tokens: int = DEFAULT_SUMMARY_TOKENS) -> None:
        if max_tokens < 1:
            raise ValueError("max_tokens must be >= 1")
        self._model = model
        self._max_tokens = max_tokens
        self._free_form = True

    async def summarize(self, query: str, messages: Sequence[Message]) -> ThreadSummary:
        """The summary of `messages` (one thread, offset order) with respect to `query`.
        Raises `ModelError` (incl. `ModelOutputInvalid` for an empty summary)."""
        if self._free_form:
            prompt = search_summary_request(query, messages, max_tokens=self._max_tokens)
            try:
                completion = await self._model.complete(prompt, max_tokens=2 * self._max_tokens + 64)
            except ModelUnsupported:
                self._free_form = False
            else:
                text = fit_to_budget(completion.text, self._max_tokens)
                if not text:
                    raise ModelOutputInvalid(
                        "the search summary is empty", raw=completion.text, usage=completion.usage
                    )
                return ThreadSummary(text=text, prompt_version=SEARCH_SUMMARY_PROMPT_VERSION)
        draft = await self._model.summarize(None, messages, max_tokens=self._max_tokens)
        text = draft.content.strip() or quoted(messages, self._max_tokens)
        if not text:
            raise ModelOutputInvalid("the summary of the matching messages is empty", usage=draft.usage)
        return ThreadSummary(text=text, prompt_version=draft.prompt_version)


def quoted(messages: Sequence[Message], max_tokens: int) -> str:
    """The messages as `User: ...` / `Assistant: ...` lines (whitespace collapsed), cut to
    `max_tokens` o200k tokens; "" when none has text."""
    lines = [f"{LABELS[m.role]}: {' '.join(m.content.split())}" for m in messages if m.role in LABELS]
    return fit_to_budget("\n".join(line for line in lines if not line.endswith(": ")), max_tokens)
