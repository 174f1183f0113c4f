"""The offline fact extractor: clear self-statements of the user, nothing else."""

from __future__ import annotations

import pytest

from core.chat.rules import extract_user_facts, slug
from tests.core.chat.conversation import conversation


def facts_of(*user_texts: str) -> dict[str, str]:
    return {f.key: f.content for f in extract_user_facts(conversation(*(("user", t) for t in user_texts)))}


@pytest.mark.parametrize(
    ("text", "key", "content"),
    [
        ("My name is Alice Martin.", "user.name", "The user's name is Alice Martin."),
        ("Hi, my name is Zoë, nice to meet you", "user.name", "The user's name is Zoë."),
        ("I'm called Jean-Luc.", "user.name", "The user's name is Jean-Luc."),
        ("Call me Ali.", "user.preferred_name", "The user wants to be called Ali."),
        ("I live in Berlin, Germany.", "user.location", "The user lives in Berlin, Germany."),
        ("Btw, I'm based in New York.", "user.location", "The user lives in New York."),
        ("I work at Acme Robotics.", "user.employer", "The user works at Acme Robotics."),
        ("I work for the BBC.", None, None),
        ("I work as a nurse at the local hospital.", "user.occupation", "The user works as a nurse."),
        ("I'm a data scientist.", "user.identity.data-scientist", "The user is a data scientist."),
        ("I am an early riser.", "user.identity.early-riser", "The user is an early riser."),
        (
            "I prefer dark roast coffee.",
            "user.preference.dark-roast-coffee",
            "The user prefers dark roast coffee.",
        ),
        ("I really love hiking in the Alps.", "user.preference.hiking", "The user loves hiking."),
        ("I hate meetings before 9am.", "user.preference.meetings", "The user hates meetings."),
        ("I like to cook.", "user.preference.cook", "The user likes to cook."),
        ("I\u2019m a vegetarian.", "user.identity.vegetarian", "The user is a vegetarian."),
    ],
)
def test_clear_self_statements_are_extracted(text: str, key: str | None, content: str | None) -> None:
    got = facts_of(text)
    assert got == ({key: content} if key else {})


@pytest.mark.parametrize(
    "text",
    [
        # questions
        "Is my name is Bob?",
        "Do I live in Paris?",
        "I like tea?",
        # negations
        "I don't like Java.",
        "I do not live in London.",
        "I'm not a developer.",
        "I no longer live in Madrid.",
        "I never liked olives.",
        "My name is not Bob.",
        # hypotheticals and uncertainty
        "If I lived in Paris I would love croissants.",
        "Imagine my name is Captain Hook.",
        "Let's say I live in Rome.",
        "Maybe I prefer tea.",
        "I think I prefer tea.",
        "Pretend I'm a pirate.",
        "In this story I work at Hogwarts.",
        # reported and quoted speech
        "My friend said my name is Bob.",
        'He wrote "I love spam" in the chat.',
        "“My name is Bob” is a line from the film.",
        "> My name is Bob\nThat was in the email.",
        "`I live in Paris` is the test string.",
        # vague or non-statements
        "I love it.",
        "I like that idea.",
        "I love how you did this.",
        "I'm a bit tired.",
        "I'm a big fan of jazz.",
        "my name is bob",
        "I live in a small town.",
        "I'd like a coffee.",
        "Tell me about my name is field.",
    ],
)
def test_questions_negations_hypotheticals_quotes_and_vague_statements_are_not(text: str) -> None:
    assert facts_of(text) == {}


def test_assistant_system_and_tool_messages_are_never_read() -> None:
    messages = conversation(
        ("assistant", "My name is HAL and I live in Space."),
        ("system", "My name is Root and I live in Berlin."),
    )
    assert extract_user_facts(messages) == []


def test_several_clauses_keys_provenance_and_latest_wins() -> None:
    messages = conversation(
        ("user", "Hello! My name is Alice and I live in Berlin; I prefer tea."),
        ("assistant", "Nice to meet you, Alice."),
        ("user", "I live in Munich now, not Berlin."),  # negation anywhere: not taken
        ("user", "Actually I live in Munich."),
        ("user", "My name is Alice."),
    )
    facts = {f.key: f for f in extract_user_facts(messages)}
    assert set(facts) == {"user.name", "user.location", "user.preference.tea"}
    assert facts["user.name"].message_ids == ("m0", "m4")  # same content: ids merged
    assert facts["user.location"].content == "The user lives in Munich."
    assert facts["user.location"].message_ids == ("m3",)  # a later statement replaces
    assert facts["user.preference.tea"].message_ids == ("m0",)
    assert all(f.category == "user_profile" for f in facts.values())
    assert (facts["user.name"].importance, facts["user.preference.tea"].importance) == (0.8, 0.7)


def test_slugs_are_ascii_and_short() -> None:
    assert slug("Crème brûlée with extra sugar on top") == "creme-brulee-extra-sugar"
    assert slug("the") == ""
