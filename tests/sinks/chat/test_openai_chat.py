"""OpenAIChatModel against a local `/v1/chat/completions` server: request shape, retries with
backoff and jitter, structured facts with the json_object fallback, malformed output, timeouts."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from core.chat.base import ChatMessage, ModelOutputInvalid, ModelRequestRejected, ModelUnavailable
from core.chat.prompts import FACTS_JSON_SCHEMA, FACTS_PROMPT_VERSION, SUMMARY_PROMPT_VERSION
from core.journal.tokens import count_tokens
from sinks.chat.openai_chat import OpenAIChatModel, backoff_delay
from tests.core.chat.conversation import conversation, summary
from tests.sinks.chat.chat_server import ChatServer, Reply, chat_reply, error_reply

CONVERSATION = conversation(
    ("user", "My name is Alice and I prefer tea."),
    ("assistant", "Noted, Alice."),
)
FACT = {
    "key": "user.name",
    "content": "The user's name is Alice.",
    "category": "user_profile",
    "importance": 0.8,
    "message_ids": ["m0"],
}


class Sleeps:
    """Records the backoff delays instead of waiting them out."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def model(server: ChatServer, sleeps: Sleeps | None = None, **kwargs: Any) -> OpenAIChatModel:
    options: dict[str, Any] = {
        "base_url": server.url,
        "api_key": "sk-test",
        "timeout_s": 5.0,
        "max_retries": 2,
        "backoff_base_s": 0.5,
        "backoff_max_s": 8.0,
        "rng": random.Random(7),
        "sleep": sleeps or Sleeps(),
    }
    return OpenAIChatModel("test-model", **(options | kwargs))


def facts_reply(*facts: dict[str, Any]) -> Reply:
    return chat_reply(json.dumps({"facts": list(facts)}))


async def test_summarize_request_shape_and_usage(chat_server: ChatServer) -> None:
    chat_server.script = [
        chat_reply("The user Alice prefers tea.", usage={"prompt_tokens": 120, "completion_tokens": 9})
    ]
    chat = model(chat_server)
    draft = await chat.summarize(summary("Earlier: Alice joined."), CONVERSATION, max_tokens=100)
    await chat.close()
    (request,) = chat_server.requests
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer sk-test"
    body = request.body
    assert body["model"] == "test-model"
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert "<previous_summary>\nEarlier: Alice joined.\n</previous_summary>" in body["messages"][1]["content"]
    assert '<message id="m0" role="user">' in body["messages"][1]["content"]
    assert body["max_completion_tokens"] == 2 * 100 + 256
    assert "response_format" not in body and "temperature" not in body
    assert draft.content == "The user Alice prefers tea."
    assert draft.token_count == count_tokens(draft.content)
    assert draft.prompt_version == SUMMARY_PROMPT_VERSION
    assert (draft.usage.prompt_tokens, draft.usage.completion_tokens, draft.usage.model) == (
        120,
        9,
        "test-model",
    )
    assert not draft.usage.estimated


async def test_summary_longer_than_the_budget_is_cut_at_sentence_boundaries(chat_server: ChatServer) -> None:
    long = " ".join(f"Sentence number {i} is about topic {i}." for i in range(60))
    chat_server.script = [chat_reply(long)]
    chat = model(chat_server)
    draft = await chat.summarize(None, CONVERSATION, max_tokens=40)
    await chat.close()
    assert 0 < draft.token_count <= 40
    assert draft.content.startswith("Sentence number 0 is about topic 0.")
    assert draft.content.endswith(".") and long.startswith(draft.content)


async def test_a_summary_cut_off_by_the_length_limit_loses_its_unfinished_sentence(
    chat_server: ChatServer,
) -> None:
    chat_server.script = [chat_reply("Alice prefers tea. She works at Acme on the", finish_reason="length")]
    chat = model(chat_server)
    draft = await chat.summarize(None, CONVERSATION, max_tokens=100)
    await chat.close()
    assert draft.content == "Alice prefers tea."


async def test_extract_facts_asks_for_strict_json_schema_and_validates(chat_server: ChatServer) -> None:
    chat_server.script = [facts_reply(FACT)]
    chat = model(chat_server)
    draft = await chat.extract_facts(CONVERSATION)
    await chat.close()
    fmt = chat_server.bodies[0]["response_format"]
    assert fmt["type"] == "json_schema"
    assert fmt["json_schema"]["strict"] is True and fmt["json_schema"]["schema"] == FACTS_JSON_SCHEMA
    (fact,) = draft.facts
    assert (fact.key, fact.category, fact.importance, fact.message_ids) == (
        "user.name",
        "user_profile",
        0.8,
        ("m0",),
    )
    assert draft.prompt_version == FACTS_PROMPT_VERSION and draft.usage.total_tokens == 18


async def test_no_messages_means_no_request(chat_server: ChatServer) -> None:
    chat = model(chat_server)
    draft = await chat.extract_facts([])
    await chat.close()
    assert draft.facts == () and chat_server.requests == []


async def test_complete_passes_the_response_format_through(chat_server: ChatServer) -> None:
    chat_server.script = [chat_reply('{"a": 1}')]
    chat = model(chat_server, temperature=0.0)
    got = await chat.complete(
        [ChatMessage(role="system", content="s"), ChatMessage(role="user", content="u")],
        response_format={"type": "json_object"},
        max_tokens=50,
    )
    await chat.close()
    body = chat_server.bodies[0]
    assert body["messages"] == [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    assert body["response_format"] == {"type": "json_object"}
    assert body["max_completion_tokens"] == 50 and body["temperature"] == 0.0
    assert got.text == '{"a": 1}' and got.usage.prompt_tokens == 11


async def test_429_and_500_are_retried_with_growing_jittered_backoff(chat_server: ChatServer) -> None:
    chat_server.script = [error_reply(429, "slow down"), error_reply(500, "oops"), chat_reply("fine")]
    sleeps = Sleeps()
    chat = model(chat_server, sleeps)
    got = await chat.complete([ChatMessage(role="user", content="hi")])
    await chat.close()
    assert got.text == "fine" and len(chat_server.requests) == 3
    first, second = sleeps.delays
    assert 0.25 <= first <= 0.5 and 0.5 <= second <= 1.0  # [d/2, d] with d = 0.5 * 2**attempt


async def test_retry_after_header_is_honoured(chat_server: ChatServer) -> None:
    chat_server.script = [error_reply(429, "slow down", **{"retry-after-ms": "3000"}), chat_reply("fine")]
    sleeps = Sleeps()
    chat = model(chat_server, sleeps)
    await chat.complete([ChatMessage(role="user", content="hi")])
    await chat.close()
    assert sleeps.delays == [3.0]


@pytest.mark.parametrize("status", [429, 500, 503])
async def test_gives_up_after_max_retries_with_model_unavailable(
    chat_server: ChatServer, status: int
) -> None:
    chat_server.script = [error_reply(status, "down")] * 3
    sleeps = Sleeps()
    chat = model(chat_server, sleeps, max_retries=2)
    with pytest.raises(ModelUnavailable, match="after 3 attempt"):
        await chat.complete([ChatMessage(role="user", content="hi")])
    await chat.close()
    assert len(chat_server.requests) == 3 and len(sleeps.delays) == 2


async def test_client_errors_are_not_retried(chat_server: ChatServer) -> None:
    chat_server.script = [error_reply(401, "bad key")]
    chat = model(chat_server)
    with pytest.raises(ModelRequestRejected, match="bad key") as caught:
        await chat.complete([ChatMessage(role="user", content="hi")])
    await chat.close()
    assert caught.value.status == 401 and len(chat_server.requests) == 1


async def test_refused_json_schema_falls_back_to_json_object_and_sticks(chat_server: ChatServer) -> None:
    refusal = 'response_format type must be one of "text" or "json_object", but got: json_schema'
    chat_server.script = [error_reply(400, refusal), facts_reply(FACT), facts_reply()]
    chat = model(chat_server)
    draft = await chat.extract_facts(CONVERSATION)
    again = await chat.extract_facts(CONVERSATION)
    await chat.close()
    formats = [b["response_format"] for b in chat_server.bodies]
    assert formats[0]["type"] == "json_schema"
    assert formats[1] == formats[2] == {"type": "json_object", "schema": FACTS_JSON_SCHEMA}
    assert [f.key for f in draft.facts] == ["user.name"] and again.facts == ()
    assert not chat.uses_json_schema


async def test_a_400_that_the_fallback_does_not_cure_is_rejected(chat_server: ChatServer) -> None:
    chat_server.script = [error_reply(400, "prompt too long")] * 2
    chat = model(chat_server)
    with pytest.raises(ModelRequestRejected) as caught:
        await chat.extract_facts(CONVERSATION)
    await chat.close()
    assert caught.value.status == 400 and len(chat_server.requests) == 2
    assert chat.uses_json_schema  # not learned from a failure


def _with(**changes: Any) -> dict[str, Any]:
    return FACT | changes


@pytest.mark.parametrize(
    ("reply", "match"),
    [
        (Reply(200, b"not json at all"), "undecodable"),
        (Reply(200, {"id": "x", "object": "chat.completion", "model": "m", "choices": []}), "no choices"),
        (chat_reply(None), "empty answer"),
        (chat_reply("   "), "empty answer"),
        (chat_reply("Sure! Here are the facts: name=Alice"), "not JSON"),
        (chat_reply('{"facts": "none"}'), "schema"),
        (chat_reply('{"items": []}'), "schema"),
        (facts_reply(_with(category="secret")), "schema"),
        (facts_reply(_with(importance=2)), "schema"),
        (facts_reply(_with(message_ids=[])), "schema"),
        (facts_reply(_with(key="")), "schema"),
        (facts_reply(_with(extra="x")), "schema"),
        (facts_reply(_with(message_ids=["m0", "m99"])), "not given"),
        (facts_reply(*[_with(key=f"k{i}") for i in range(51)]), "at most 50"),
    ],
    ids=[
        "body-not-json",
        "empty-choices",
        "null-content",
        "blank-content",
        "content-not-json",
        "facts-not-a-list",
        "wrong-top-level",
        "bad-category",
        "importance-out-of-range",
        "no-message-ids",
        "empty-key",
        "extra-field",
        "unknown-message-id",
        "too-many-facts",
    ],
)
async def test_malformed_output_raises_model_output_invalid(
    chat_server: ChatServer, reply: Reply, match: str
) -> None:
    chat_server.script = [reply]
    chat = model(chat_server, max_retries=0)
    with pytest.raises(ModelOutputInvalid, match=match) as caught:
        await chat.extract_facts(CONVERSATION)
    await chat.close()
    assert len(chat_server.requests) == 1
    if reply.body is not None and not isinstance(reply.body, bytes) and reply.body.get("choices"):
        assert caught.value.usage is not None and caught.value.usage.total_tokens == 18


async def test_invalid_output_carries_the_raw_text_truncated(chat_server: ChatServer) -> None:
    chat_server.script = [chat_reply("x" * 10_000)]
    chat = model(chat_server)
    with pytest.raises(ModelOutputInvalid) as caught:
        await chat.extract_facts(CONVERSATION)
    await chat.close()
    assert caught.value.raw.startswith("xxxx") and len(caught.value.raw) == 2_001  # + "…"


async def test_fenced_json_is_accepted(chat_server: ChatServer) -> None:
    chat_server.script = [chat_reply("```json\n" + json.dumps({"facts": [FACT]}) + "\n```")]
    chat = model(chat_server)
    draft = await chat.extract_facts(CONVERSATION)
    await chat.close()
    assert [f.key for f in draft.facts] == ["user.name"]


async def test_missing_usage_is_estimated_locally(chat_server: ChatServer) -> None:
    reply = chat_reply("A short summary.")
    del reply.body["usage"]
    chat_server.script = [reply]
    chat = model(chat_server)
    draft = await chat.summarize(None, CONVERSATION, max_tokens=50)
    await chat.close()
    assert draft.usage.estimated
    assert draft.usage.completion_tokens == count_tokens("A short summary.")
    assert draft.usage.prompt_tokens > count_tokens(CONVERSATION[0].content)


async def test_timeouts_are_retried_then_raise_model_unavailable(chat_server: ChatServer) -> None:
    chat_server.script = [Reply(200, {}, delay_s=1.0)] * 2
    sleeps = Sleeps()
    chat = model(chat_server, sleeps, timeout_s=0.2, max_retries=1)
    with pytest.raises(ModelUnavailable, match="Timeout"):
        await chat.complete([ChatMessage(role="user", content="hi")])
    await chat.close()
    assert len(chat_server.requests) == 2 and len(sleeps.delays) == 1


async def test_an_unreachable_endpoint_raises_model_unavailable() -> None:
    chat = OpenAIChatModel(
        "m", base_url="http://127.0.0.1:9/v1", timeout_s=1.0, max_retries=1, sleep=Sleeps()
    )
    with pytest.raises(ModelUnavailable, match="Connection"):
        await chat.complete([ChatMessage(role="user", content="hi")])
    await chat.close()


def test_backoff_grows_exponentially_is_capped_and_jittered() -> None:
    rng = random.Random(1)
    for attempt in range(8):
        ceiling = min(8.0, 0.5 * 2**attempt)
        delays = {backoff_delay(attempt, base_s=0.5, max_s=8.0, rng=rng) for _ in range(20)}
        assert all(ceiling / 2 <= d <= ceiling for d in delays)
        assert len(delays) > 1  # jitter: not one fixed value


def test_constructor_rejects_unusable_arguments() -> None:
    with pytest.raises(ValueError, match="model"):
        OpenAIChatModel("", base_url="http://x/v1")
    with pytest.raises(ValueError, match="max_retries"):
        OpenAIChatModel("m", base_url="http://x/v1", max_retries=-1)
