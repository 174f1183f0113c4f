"""OfflineChatModel: the ChatModel contract without network or weights."""

from __future__ import annotations

import pytest

from core.chat.base import ChatMessage, ChatModel, ModelError, ModelUnsupported
from core.chat.extractive import OFFLINE_SUMMARY_VERSION
from core.chat.offline import OFFLINE_FACTS_VERSION, OfflineChatModel
from core.journal.tokens import count_tokens
from tests.core.chat.conversation import conversation, summary

MESSAGES = conversation(
    ("user", "My name is Alice and I work at Acme Robotics."),
    ("assistant", "Nice to meet you, Alice. What are you working on?"),
    ("user", "We decided to ship the Zephyr warehouse robot on 12 May."),
)


async def test_summarize_folds_the_previous_summary_within_the_budget() -> None:
    model: ChatModel = OfflineChatModel()
    previous = summary("User: The Zephyr robot uses the new Lidar sensor from Sicklabs.")
    draft = await model.summarize(previous, MESSAGES, max_tokens=60)
    assert draft.content.startswith("User: The Zephyr robot uses the new Lidar sensor from Sicklabs.")
    assert "Zephyr warehouse robot on 12 May" in draft.content
    assert draft.token_count == count_tokens(draft.content) <= 60
    assert draft.prompt_version == OFFLINE_SUMMARY_VERSION
    assert draft.usage.model == model.model_id == "offline"
    assert draft.usage.prompt_tokens == sum(m.token_count for m in MESSAGES) + previous.token_count
    assert draft.usage.completion_tokens == draft.token_count
    with pytest.raises(ValueError):
        await model.summarize(None, MESSAGES, max_tokens=0)


async def test_extract_facts_uses_the_rules() -> None:
    draft = await OfflineChatModel().extract_facts(MESSAGES)
    assert [(f.key, f.message_ids) for f in draft.facts] == [
        ("user.name", ("m0",)),
        ("user.employer", ("m0",)),
    ]
    assert draft.prompt_version == OFFLINE_FACTS_VERSION
    assert draft.usage.prompt_tokens == MESSAGES[0].token_count + MESSAGES[2].token_count


async def test_complete_is_unsupported_and_says_how_to_get_a_real_model() -> None:
    model = OfflineChatModel()
    with pytest.raises(ModelUnsupported, match="MEMSTREAM_CHAT_MODEL__PROVIDER=openai") as caught:
        await model.complete([ChatMessage(role="user", content="hi")])
    assert isinstance(caught.value, ModelError)
    await model.close()
