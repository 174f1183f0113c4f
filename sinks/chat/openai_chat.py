"""A `ChatModel` over any OpenAI-compatible `/v1/chat/completions` endpoint (OpenAI, vLLM, a local
llama.cpp server ...), through the `openai` package's AsyncOpenAI.

Retries: one policy, ours (the client's own retries are off). Connection errors, timeouts, 408,
429 and 5xx answers are retried up to `max_retries` times with exponential backoff and jitter
(`backoff_delay`), waiting at least what a `Retry-After`/`retry-after-ms` header asks (up to
`RETRY_AFTER_CAP_S`). What still fails raises `ModelUnavailable`; other 4xx raise
`ModelRequestRejected` at once.

Facts use structured output: `response_format` `json_schema` (strict). A server that refuses it
with a 400 (llama.cpp's does) is asked again with `json_object` (+ the schema under `schema`,
which llama.cpp uses to constrain decoding), and this client keeps using `json_object` from then
on. Whatever comes back is validated (JSON, schema, message ids among those given): anything else
raises `ModelOutputInvalid`.

Summaries are capped by the server at `2 * max_tokens + 256` completion tokens and then cut to
`max_tokens` o200k tokens at sentence boundaries, so the draft always respects the budget.

Usage comes from the server's `usage`; when a server reports none, it is estimated with local
o200k counts (`Usage.estimated`).
"""

from __future__ import annotations

import asyncio
import json
import random
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import openai
from pydantic import BaseModel, ConfigDict, ValidationError

from core.chat.base import (
    MAX_FACTS,
    ChatMessage,
    Completion,
    ExtractedFact,
    FactsDraft,
    ModelOutputInvalid,
    ModelRequestRejected,
    ModelUnavailable,
    SummaryDraft,
    Usage,
)
from core.chat.prompts import (
    FACTS_PROMPT_VERSION,
    FACTS_RESPONSE_FORMAT,
    FACTS_RESPONSE_FORMAT_FALLBACK,
    SUMMARY_PROMPT_VERSION,
    facts_request,
    summary_request,
)
from core.chat.text import fit_to_budget, split_sentences
from core.journal.models import Message
from core.journal.tokens import count_tokens
from core.summaries.models import Summary

RETRY_AFTER_CAP_S = 60.0
_RETRYABLE_STATUS = {408, 429}
_FENCE = re.compile(r"^```[a-zA-Z]*\s*\n?(.*?)\n?```$", re.DOTALL)

Sleep = Callable[[float], Awaitable[None]]


def backoff_delay(attempt: int, *, base_s: float, max_s: float, rng: random.Random) -> float:
    """Seconds to wait before retry number `attempt + 1` (attempt 0 = after the first failure):
    uniform in [d/2, d] with d = min(max_s, base_s * 2**attempt) ("equal jitter": grows
    exponentially, never zero, and concurrent clients spread out)."""
    ceiling = min(max_s, base_s * (2.0**attempt))
    return ceiling / 2 + rng.uniform(0.0, ceiling / 2)


def retry_after_s(exc: openai.APIStatusError) -> float:
    """What the answer's `retry-after-ms` or `retry-after` (seconds) header asks for, capped at
    RETRY_AFTER_CAP_S; 0 when absent or not a number (HTTP dates are ignored)."""
    headers = exc.response.headers
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) * scale
        except ValueError:
            continue
        return min(max(seconds, 0.0), RETRY_AFTER_CAP_S)
    return 0.0


class _FactsAnswer(BaseModel):
    model_config = ConfigDict(extra="forbid")

    facts: list[ExtractedFact]


def parse_facts(text: str, message_ids: Sequence[str], usage: Usage) -> tuple[ExtractedFact, ...]:
    """The facts of a model's JSON answer (a ```json fence around it is tolerated). Raises
    `ModelOutputInvalid` for non-JSON, a schema mismatch, more than MAX_FACTS facts, or a
    message id that is not one of `message_ids`."""
    body = text.strip()
    fenced = _FENCE.match(body)
    if fenced:
        body = fenced.group(1).strip()
    try:
        decoded = json.loads(body)
    except ValueError as exc:
        raise ModelOutputInvalid(f"facts answer is not JSON: {exc}", raw=text, usage=usage) from None
    try:
        answer = _FactsAnswer.model_validate(decoded)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(root)'}: {err['msg']}" for err in exc.errors()[:5]
        )
        raise ModelOutputInvalid(
            f"facts answer does not match the schema: {problems}", raw=text, usage=usage
        ) from None
    if len(answer.facts) > MAX_FACTS:
        raise ModelOutputInvalid(
            f"facts answer has {len(answer.facts)} facts; at most {MAX_FACTS}", raw=text, usage=usage
        )
    known = set(message_ids)
    for fact in answer.facts:
        unknown = [m for m in fact.message_ids if m not in known]
        if unknown:
            raise ModelOutputInvalid(
                f"fact {fact.key!r} cites message ids that were not given: {unknown[:3]}",
                raw=text,
                usage=usage,
            )
    return tuple(answer.facts)


class OpenAIChatModel:
    """`ChatModel` over an OpenAI-compatible endpoint (module doc)."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None,
        api_key: str | None = None,
        timeout_s: float = 30.0,
        max_retries: int = 3,
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 8.0,
        temperature: float | None = None,
        rng: random.Random | None = None,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        if not model:
            raise ValueError("model must be a non-empty model name")
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        if timeout_s <= 0:
            raise ValueError("timeout_s must be > 0")
        self._model = model
        self._max_retries = max_retries
        self._backoff_base_s = backoff_base_s
        self._backoff_max_s = backoff_max_s
        self._temperature = temperature
        self._rng = rng or random.Random()
        self._sleep = sleep
        self._json_schema_supported = True
        self._client = openai.AsyncOpenAI(
            base_url=base_url,
            api_key=api_key or "unused",  # compatible local servers often need no key
            timeout=timeout_s,
            max_retries=0,  # one retry policy: ours
        )

    @property
    def model_id(self) -> str:
        return self._model

    @property
    def uses_json_schema(self) -> bool:
        """False once the server refused `json_schema` and `json_object` worked instead."""
        return self._json_schema_supported

    async def complete(
        self,
        messages: Sequence[ChatMessage],
        *,
        response_format: dict[str, Any] | None = None,
        max_tokens: int | None = None,
    ) -> Completion:
        text, usage, _ = await self._call(
            list(messages), response_format=response_format, max_tokens=max_tokens
        )
        return Completion(text=text, usage=usage)

    async def summarize(
        self, previous: Summary | None, messages: Sequence[Message], *, max_tokens: int
    ) -> SummaryDraft:
        if max_tokens < 1:
            raise ValueError("max_tokens must be >= 1")
        prompt = summary_request(previous, messages, max_tokens=max_tokens)
        text, usage, finish = await self._call(prompt, max_tokens=2 * max_tokens + 256)
        if finish == "length":  # cut off mid-sentence: drop the unfinished last sentence
            sentences = split_sentences(text)
            if len(sentences) > 1 and not sentences[-1].endswith((".", "!", "?", "…")):
                text = text[: text.rstrip().rfind(sentences[-1])]
        content = fit_to_budget(text, max_tokens)
        if not content:
            raise ModelOutputInvalid(
                "summary answer is empty after fitting the budget", raw=text, usage=usage
            )
        return SummaryDraft(
            content=content,
            token_count=count_tokens(content),
            usage=usage,
            prompt_version=SUMMARY_PROMPT_VERSION,
        )

    async def extract_facts(self, messages: Sequence[Message]) -> FactsDraft:
        if not messages:
            empty = Usage(prompt_tokens=0, completion_tokens=0, model=self._model)
            return FactsDraft(facts=(), usage=empty, prompt_version=FACTS_PROMPT_VERSION)
        prompt = facts_request(messages)
        if self._json_schema_supported:
            try:
                text, usage, _ = await self._call(prompt, response_format=FACTS_RESPONSE_FORMAT)
            except ModelRequestRejected as exc:
                if exc.status != 400:
                    raise
                text, usage, _ = await self._call(prompt, response_format=FACTS_RESPONSE_FORMAT_FALLBACK)
                self._json_schema_supported = False  # json_object was accepted where json_schema was not
        else:
            text, usage, _ = await self._call(prompt, response_format=FACTS_RESPONSE_FORMAT_FALLBACK)
        facts = parse_facts(text, [m.message_id for m in messages], usage)
        return FactsDraft(facts=facts, usage=usage, prompt_version=FACTS_PROMPT_VERSION)

    async def close(self) -> None:
        await self._client.close()

    # ---- one request, with the retry policy ----

    async def _call(
        self,
        prompt: list[ChatMessage],
        *,
        response_format: dict[str, Any] | None = None,
        max_tokens: int | None = None,
    ) -> tuple[str, Usage, str | None]:
        """(answer text, usage, finish_reason) of one chat completion, retried per the module doc."""
        kwargs: dict[str, Any] = {"model": self._model, "messages": [m.model_dump() for m in prompt]}
        if response_format is not None:
            kwargs["response_format"] = response_format
        if max_tokens is not None:
            kwargs["max_completion_tokens"] = max_tokens
        if self._temperature is not None:
            kwargs["temperature"] = self._temperature
        response = await self._create_with_retries(kwargs)
        return self._answer(response, prompt)

    async def _create_with_retries(self, kwargs: dict[str, Any]) -> object:
        where = f"chat model {self._model!r} at {self._client.base_url}"
        for attempt in range(self._max_retries + 1):
            wait = 0.0
            try:
                return await self._client.chat.completions.create(**kwargs)
            except openai.APIStatusError as exc:
                if exc.status_code not in _RETRYABLE_STATUS and exc.status_code < 500:
                    raise ModelRequestRejected(
                        f"{where} refused the request ({exc.status_code}): {exc.message}",
                        status=exc.status_code,
                    ) from exc
                failure: Exception = exc
                wait = retry_after_s(exc)
            except openai.APIConnectionError as exc:  # includes APITimeoutError
                failure = exc
            except (ValueError, TypeError, KeyError) as exc:  # a 2xx body that is not a JSON object
                raise ModelOutputInvalid(f"{where} sent an undecodable answer: {exc}") from exc
            if attempt == self._max_retries:
                raise ModelUnavailable(
                    f"{where} failed after {attempt + 1} attempt(s): {type(failure).__name__}: {failure}"
                ) from failure
            delay = backoff_delay(
                attempt, base_s=self._backoff_base_s, max_s=self._backoff_max_s, rng=self._rng
            )
            await self._sleep(max(delay, wait))
        raise AssertionError("unreachable")  # pragma: no cover

    def _answer(self, response: object, prompt: list[ChatMessage]) -> tuple[str, Usage, str | None]:
        choices = getattr(response, "choices", None)
        first = choices[0] if isinstance(choices, list) and choices else None
        message = getattr(first, "message", None)
        content = getattr(message, "content", None)
        text = content if isinstance(content, str) else ""
        usage = self._usage(response, prompt, text)
        if first is None:
            raise ModelOutputInvalid("the answer has no choices", raw=_dump(response), usage=usage)
        if not text.strip():
            refusal = getattr(message, "refusal", None)
            reason = (
                f"the model refused: {refusal}" if isinstance(refusal, str) and refusal else "empty answer"
            )
            raise ModelOutputInvalid(reason, raw=_dump(response), usage=usage)
        finish = getattr(first, "finish_reason", None)
        return text, usage, finish if isinstance(finish, str) else None

    def _usage(self, response: object, prompt: list[ChatMessage], text: str) -> Usage:
        model = getattr(response, "model", None)
        model = model if isinstance(model, str) and model else self._model
        reported = getattr(response, "usage", None)
        prompt_tokens = getattr(reported, "prompt_tokens", None)
        completion_tokens = getattr(reported, "completion_tokens", None)
        if (
            isinstance(prompt_tokens, int)
            and isinstance(completion_tokens, int)
            and min(prompt_tokens, completion_tokens) >= 0
        ):
            return Usage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, model=model)
        return Usage(
            prompt_tokens=sum(count_tokens(m.content) for m in prompt),
            completion_tokens=count_tokens(text),
            model=model,
            estimated=True,
        )


def _dump(response: object) -> str:
    dump = getattr(response, "model_dump_json", None)
    if callable(dump):
        try:
            return str(dump())
        except Exception:  # a constructed-but-malformed response may not serialise
            pass
    return repr(response)
