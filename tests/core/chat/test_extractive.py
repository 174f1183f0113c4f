"""The offline extractive summarizer: bounded, progressive, salient, deterministic."""

from __future__ import annotations

import pytest

from core.chat.extractive import extractive_summary
from core.chat.text import split_sentences
from core.journal.models import Message, Role
from core.journal.tokens import count_tokens
from tests.core.chat.conversation import conversation

FILLER: list[tuple[Role, str]] = [
    ("assistant", "Sure, happy to help with that whenever you are ready to continue."),
    ("user", "Okay, thanks, that sounds fine to me for now."),
]


def long_conversation(turns: int = 40) -> list[Message]:
    topics = ["billing", "search", "onboarding", "reporting", "exports"]
    lines: list[tuple[Role, str]] = []
    for i in range(turns):
        topic = topics[i % len(topics)]
        lines.append(("user", f"Can we look at the {topic} module next and check the {topic} tests {i}?"))
        lines.append(
            ("assistant", f"The {topic} module has {i + 3} failing tests; I will go through them one by one.")
        )
    return conversation(*lines)


@pytest.mark.parametrize("budget", [5, 30, 120, 400])
def test_the_summary_never_exceeds_the_budget(budget: int) -> None:
    text = extractive_summary("User: We ship the Zephyr release on 12 May.", long_conversation(), budget)
    assert text and count_tokens(text) <= budget


def test_salient_statements_beat_small_talk() -> None:
    messages = conversation(
        *FILLER,
        ("user", "We decided to migrate the billing service to Postgres 16 before the deadline on March 3."),
        *FILLER,
        ("assistant", "Great, good question, I am glad you asked about it."),
    )
    text = extractive_summary(None, messages, 30)
    assert (
        text
        == "User: We decided to migrate the billing service to Postgres 16 before the deadline on March 3."
    )


def test_lines_are_labelled_and_in_conversation_order() -> None:
    messages = conversation(
        ("user", "My team maintains the payments gateway in Go."),
        ("assistant", "The gateway retries card payments three times with exponential backoff."),
        ("user", "We agreed to cap the retries at two attempts from next week."),
    )
    lines = extractive_summary(None, messages, 200).splitlines()
    assert lines == [
        "User: My team maintains the payments gateway in Go.",
        "Assistant: The gateway retries card payments three times with exponential backoff.",
        "User: We agreed to cap the retries at two attempts from next week.",
    ]


def test_previous_summary_is_folded_in_and_salient_history_survives() -> None:
    previous = "\n".join(
        [
            "User: The Zephyr project ships to production on 12 May with the new billing engine.",
            "Assistant: Okay, sounds good, happy to help anytime.",
            "User: The weather was nice today and the coffee was fine.",
        ]
    )
    messages = conversation(
        ("user", "For Zephyr we also need the invoice export before the 12 May launch."),
        ("assistant", "I will add the invoice export to the Zephyr plan and check the billing engine."),
        *FILLER,
    )
    text = extractive_summary(previous, messages, 60)
    lines = text.splitlines()
    assert lines[0] == "User: The Zephyr project ships to production on 12 May with the new billing engine."
    assert "User: For Zephyr we also need the invoice export before the 12 May launch." in lines
    assert "weather" not in text and "happy to help" not in text


def test_progressive_rounds_keep_early_key_facts_within_the_budget() -> None:
    summary: str | None = None
    first = conversation(("user", "Our company Acme Robotics builds warehouse robots in Berlin since 2019."))
    summary = extractive_summary(summary, first, 80)
    for _ in range(5):
        summary = extractive_summary(summary, long_conversation(10), 80)
        assert count_tokens(summary) <= 80
    assert "Acme Robotics builds warehouse robots in Berlin since 2019." in summary


def test_new_messages_always_get_room_next_to_a_full_previous_summary() -> None:
    previous = "\n".join(
        f"User: Fact number {i} concerns the Zephyr billing engine release." for i in range(30)
    )
    messages = conversation(("user", "The Orion mobile app launches on 9 June in Lisbon."))
    text = extractive_summary(previous, messages, 60)
    assert "Orion mobile app launches on 9 June in Lisbon" in text
    assert "Fact number" in text


def test_near_duplicates_are_kept_once() -> None:
    messages = conversation(
        ("user", "The launch date for the Zephyr release is 12 May."),
        ("assistant", "The launch date for the Zephyr release is 12 May, noted."),
        ("user", "The launch date for the Zephyr release is 12 May!"),
    )
    text = extractive_summary("User: The launch date for the Zephyr release is 12 May.", messages, 200)
    assert sum("launch date" in line for line in text.splitlines()) == 1


def test_it_is_deterministic() -> None:
    messages = long_conversation()
    previous = "User: We ship the Zephyr release on 12 May."
    assert len({extractive_summary(previous, messages, 100) for _ in range(3)}) == 1


def test_code_tools_system_and_reasoning_are_left_out() -> None:
    from core.journal.models import ToolCall
    from tests.core.chat.conversation import message

    messages = [
        message(0, "system", "You are a helpful assistant with many secret rules."),
        message(
            1,
            "user",
            "Please fix the parser bug in the tokenizer module.\n```python\ndef broken_thing(): pass\n```",
        ),
        message(
            2,
            "assistant",
            "",
            tool_call=ToolCall(id="c1", name="search_code", arguments='{"query": "parser tokenizer"}'),
        ),
        message(3, "tool", "", tool_call=ToolCall(id="c1", result="tokenizer.py line 40 parser crash stack")),
    ]
    text = extractive_summary(None, messages, 200)
    assert text == "User: Please fix the parser bug in the tokenizer module."


def test_nothing_to_say_gives_an_empty_summary_and_a_huge_sentence_is_cut() -> None:
    assert extractive_summary(None, conversation(("user", "ok"), ("assistant", "Sure!")), 50) == ""
    huge = " ".join(f"word{i}" for i in range(500)) + "."
    text = extractive_summary(None, conversation(("user", huge)), 40)
    assert text.startswith("User: word0 word1") and text.endswith("…") and count_tokens(text) <= 40


def test_split_sentences_handles_abbreviation_free_prose_and_lines() -> None:
    assert split_sentences("One thing. Two things!  Three?\nFour\n\n five. six") == [
        "One thing.",
        "Two things!",
        "Three?",
        "Four",
        "five. six",
    ]


def test_bad_budget_is_refused() -> None:
    with pytest.raises(ValueError):
        extractive_summary(None, [], 0)
