"""Text helpers shared by the models: sentence splitting and cutting text to an o200k budget."""

from __future__ import annotations

import re

from core.journal.tokens import count_tokens

_SENTENCE_GAP = re.compile(r"[.!?…]([\"'”\u2019)\]]*\s+)(?=[\"'“\u2018(\[]?[A-Z0-9À-Þ])")
"""A sentence ends at punctuation followed by quotes or brackets, spaces and a capitalised word; the
gap (group 1: closing quotes/brackets and spaces) is dropped. Anchored on the punctuation itself,
not on a lookbehind, so the regex engine starts only at punctuation."""
_SPACES = re.compile(r"[ \t\f\v]+")
ELLIPSIS = "…"


def split_sentences(text: str) -> list[str]:
    """Sentences of `text`: split at line breaks and at `.`, `!`, `?` followed by a capitalised
    word; whitespace collapsed; empty pieces dropped."""
    out: list[str] = []
    for line in text.splitlines():
        line = _SPACES.sub(" ", line).strip()
        if not line:
            continue
        start = 0
        for gap in _SENTENCE_GAP.finditer(line):
            piece = line[start : gap.start(1)].strip()
            if piece:
                out.append(piece)
            start = gap.end(1)
        piece = line[start:].strip()
        if piece:
            out.append(piece)
    return out


def truncate_to_tokens(text: str, max_tokens: int) -> str:
    """The longest word prefix of `text` that, with a trailing `…`, fits in `max_tokens`;
    `text` itself when it fits; "" when not even one word does."""
    if count_tokens(text) <= max_tokens:
        return text
    words = text.split()
    lo, hi = 0, len(words)  # invariant: prefix of lo words fits
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count_tokens(" ".join(words[:mid]) + ELLIPSIS) <= max_tokens:
            lo = mid
        else:
            hi = mid - 1
    return " ".join(words[:lo]) + ELLIPSIS if lo else ""


def fit_to_budget(text: str, max_tokens: int) -> str:
    """`text` cut to at most `max_tokens`: whole trailing sentences are dropped first (line
    breaks between the kept ones are kept); if even the first sentence is too long it is cut at
    a word boundary (`truncate_to_tokens`)."""
    text = text.strip()
    if count_tokens(text) <= max_tokens:
        return text
    pieces = [(n, s) for n, line in enumerate(text.splitlines()) for s in split_sentences(line)]
    if not pieces:
        return ""
    lo, hi = 0, len(pieces)  # invariant: the first lo pieces fit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count_tokens(_render(pieces[:mid])) <= max_tokens:
            lo = mid
        else:
            hi = mid - 1
    return _render(pieces[:lo]) if lo else truncate_to_tokens(pieces[0][1], max_tokens)


def _render(pieces: list[tuple[int, str]]) -> str:
    lines: list[str] = []
    last = -1
    for n, sentence in pieces:
        if n == last:
            lines[-1] += " " + sentence
        else:
            lines.append(sentence)
            last = n
    return "\n".join(lines)
