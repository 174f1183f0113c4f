"""Sentence splitting and budget fitting."""

from __future__ import annotations

from core.chat.text import fit_to_budget, truncate_to_tokens
from core.journal.tokens import count_tokens


def test_fit_to_budget_drops_whole_trailing_sentences_and_keeps_lines() -> None:
    text = "First point here. Second point here.\nThird point on a new line. Fourth point."
    assert fit_to_budget(text, 100) == text
    for budget in range(1, count_tokens(text)):
        fitted = fit_to_budget(text, budget)
        assert count_tokens(fitted) <= budget
    assert fit_to_budget(
        text, count_tokens("First point here. Second point here.\nThird point on a new line.")
    ) == ("First point here. Second point here.\nThird point on a new line.")


def test_a_first_sentence_longer_than_the_budget_is_cut_at_a_word() -> None:
    text = " ".join(["alpha"] * 100) + ". Next."
    fitted = fit_to_budget(text, 10)
    assert fitted.startswith("alpha alpha") and fitted.endswith("…") and count_tokens(fitted) <= 10
    assert truncate_to_tokens("short", 10) == "short"
    assert truncate_to_tokens("supercalifragilistic", 1) == ""
