"""The chat-model interface used by the summarizer, the pre-compaction flush and later features.

Every call returns what it produced together with the `Usage` it cost. Failures are typed:

- `ModelUnavailable`: the endpoint could not be reached or kept failing (connection errors,
  timeouts, 429 and 5xx answers) after the provider's retries. Try again later.
- `ModelRequestRejected`: the endpoint refused the request (a 4xx other than 429: bad key,
  unknown model, prompt too long ...). Retrying the same request will not help.
- `ModelOutputInvalid`: the model answered, but not in the required form (not JSON, wrong
  schema, no choices, empty text). Carries the raw text (truncated) and the usage it cost.
- `ModelUnsupported`: this model cannot do that kind of call at all (the offline model has no
  free-form completion).

All are `ModelError`s, so a best-effort caller (the flush) catches one type.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from core.errors import MemstreamError
from core.journal.models import Id, Message
from core.memory.models import Category
from core.summaries.models import Summary

RAW_TEXT_LIMIT = 2_000
FACT_KEY_MAX_CHARS = 200  # the agent-memory key limit
FACT_CONTENT_MAX_CHARS = 2_000  # the smallest category content limit
MAX_FACTS = 50


class Usage(BaseModel):
    """Tokens one call cost. `estimated` is true when the server reported none and the counts
    are local o200k counts of the prompt and the answer."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prompt_tokens: int = Field(ge=0)
    completion_tokens: int = Field(ge=0)
    model: str
    estimated: bool = False

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            model=self.model,
            estimated=self.estimated or other.estimated,
        )


class ChatMessage(BaseModel):
    """One message of a prompt sent to a model (not a journal message)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    role: Literal["system", "user", "assistant"]
    content: str


class Completion(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    text: str
    usage: Usage


class SummaryDraft(BaseModel):
    """A new summary text: `token_count` (o200k) never exceeds the `max_tokens` asked for.
    `prompt_version` names the prompt (or, offline, the algorithm) that produced it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    content: str
    token_count: int = Field(ge=0)
    usage: Usage
    prompt_version: str


class ExtractedFact(BaseModel):
    """A durable fact proposed for agent memory; `message_ids` are the messages it came from
    (always a non-empty subset of the messages given). It still goes through agent memory's
    normal write path (screening, capacity, same-key rules)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str = Field(min_length=1, max_length=FACT_KEY_MAX_CHARS, pattern=r"^\S(?:.*\S)?$")
    content: str = Field(min_length=1, max_length=FACT_CONTENT_MAX_CHARS)
    category: Category
    importance: float = Field(ge=0.0, le=1.0)
    message_ids: tuple[Id, ...] = Field(min_length=1)


class FactsDraft(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    facts: tuple[ExtractedFact, ...] = Field(max_length=MAX_FACTS)
    usage: Usage
    prompt_version: str


class ModelError(MemstreamError):
    """A model call failed; nothing was produced."""

    code = "model_error"


class ModelUnavailable(ModelError):
    """Network error, timeout, 429 or 5xx, still failing after the retries."""

    code = "model_unavailable"


class ModelRequestRejected(ModelError):
    """The endpoint refused the request with a 4xx (other than 429); `status` is the HTTP status."""

    code = "model_request_rejected"

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status


class ModelUnsupported(ModelError):
    """The model cannot perform this kind of call."""

    code = "model_unsupported"


class ModelOutputInvalid(ModelError):
    """The model answered in the wrong form. `raw` is its text, cut to `RAW_TEXT_LIMIT`
    characters; `usage` is what the call cost (None when unknown)."""

    code = "model_output_invalid"

    def __init__(self, message: str, *, raw: str = "", usage: Usage | None = None) -> None:
        super().__init__(message)
        self.raw = raw if len(raw) <= RAW_TEXT_LIMIT else raw[:RAW_TEXT_LIMIT] + "…"
        self.usage = usage


class ChatModel(Protocol):
    """A chat model. Implementations are safe to share between concurrent tasks."""

    @property
    def model_id(self) -> str:
        """The model's name, as recorded with what it produced."""
        ...

    async def summarize(
        self, previous: Summary | None, messages: Sequence[Message], *, max_tokens: int
    ) -> SummaryDraft:
        """Fold `previous` (the thread's current summary, if any) and `messages` (the messages
        after it, in offset order) into a new summary of at most `max_tokens` o200k tokens.
        ValueError for `max_tokens < 1`; `ModelError`s as in the module doc."""
        ...

    async def extract_facts(self, messages: Sequence[Message]) -> FactsDraft:
        """Durable facts stated in `messages` (possibly none). `ModelError`s as in the module doc."""
        ...

    async def complete(
        self,
        messages: Sequence[ChatMessage],
        *,
        response_format: dict[str, Any] | None = None,
        max_tokens: int | None = None,
    ) -> Completion:
        """A free-form completion of `messages`; `response_format` is passed as the OpenAI
        parameter of that name. `ModelError`s as in the module doc."""
        ...

    async def close(self) -> None:
        """Release connections. The model must not be used afterwards."""
        ...
