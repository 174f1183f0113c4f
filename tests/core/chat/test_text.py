"""Sentence splitting and budget fitting."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from core.chat.extractive import content_terms
from core.chat.text import fit_to_budget, split_sentences, truncate_to_tokens
from core.journal.tokens import count_tokens

# The first implementations, kept as the reference the faster ones must agree with.
_SENTENCE_END = re.compile(r"(?<=[.!?…])[\"'”\u2019)\]]*\s+(?=[\"'“\u2018(\[]?[A-Z0-9À-Þ])")
_SPACES = re.compile(r"[ \t\f\v]+")
_WORD = re.compile(r"[^\W_][\w'\u2019-]*", re.UNICODE)


def reference_sentences(text: str) -> list[str]:
    out: list[str] = []
    for line in text.splitlines():
        line = _SPACES.sub(" ", line).strip()
        if line:
            out.extend(piece.strip() for piece in _SENTENCE_END.split(line) if piece.strip())
    return out


def reference_terms(text: str) -> list[str]:
    from core.chat.extractive import STOP_WORDS

    words = (w.lower().replace("\u2019", "'").strip("'-") for w in _WORD.findall(text))
    return [w for w in words if w and w not in STOP_WORDS and (len(w) > 1 or w.isdigit())]


# text made mostly of the characters the rules look at, plus any character at all
_PIECES = st.sampled_from(
    [" ", "  ", "\n", "\t", ".", "!", "?", "…", '"', "'", "”", "“", "\u2019", "\u2018", ")", "(", "[", "]",
     "-", "_", "A", "Zoe", "É", "b", "is", "the", "7", "42", "x'", "'s", "ok-", "İ", "ß", "Ǆ",
     ". A", "… Zoe", '!" (B', "?\u2019  7", ".) [É", ". b"]
)  # fmt: skip
TEXTS = st.lists(st.one_of(_PIECES, st.text(max_size=3)), max_size=40).map("".join)


@settings(max_examples=600, deadline=None)
@given(TEXTS)
def test_sentences_are_split_as_the_reference_splits_them(text: str) -> None:
    assert split_sentences(text) == reference_sentences(text)


@settings(max_examples=600, deadline=None)
@given(TEXTS)
def test_content_terms_are_the_reference_terms(text: str) -> None:
    assert content_terms(text) == reference_terms(text)


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
