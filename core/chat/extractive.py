"""The offline summarizer: extractive, deterministic, bounded by an o200k token budget.

`extractive_summary(previous, messages, max_tokens)` picks whole sentences; it never writes text
of its own apart from the `User:` / `Assistant:` label of each line. How:

1. Candidates: the sentences of the previous summary (as they are) and the sentences of the new
   user and assistant messages (labelled `User: ` / `Assistant: `; code blocks, tool calls, tool
   results, system messages and reasoning are left out). A sentence needs at least two content
   words; one longer than MAX_SENTENCE_TOKENS is cut at a word boundary with `…`.
2. Salience: every content word weighs 1 + ln(its frequency across the previous summary and the
   new messages), so recurring topics count; a sentence scores the sum of its distinct words'
   weights / sqrt(their number), multiplied up for user statements, first-person statements,
   numbers, names (capitalised words inside a sentence), decisions and commitments ("decided",
   "agreed", "deadline", "will" ...) and recency, and down for questions.
3. Selection: greedy by score (ties: earlier first), skipping near-duplicates (Jaccard similarity
   of content words >= SIMILAR) of anything already chosen. The previous summary may fill up to
   PREVIOUS_SHARE of the budget and the new messages the rest; whatever one side leaves unused
   goes to the other. So the most salient history survives and new content always gets room.
4. Output: one sentence per line, the previous summary's first (in their order), then the new
   ones in conversation order; its o200k count is <= max_tokens (checked on the final text).

What it cannot do: paraphrase, merge or resolve facts ("moved from Berlin to Paris" keeps both
sentences if both are salient), understand pronouns, or drop a statement that later became false.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from core.chat.text import split_sentences, truncate_to_tokens
from core.journal.models import Message
from core.journal.tokens import count_tokens

OFFLINE_SUMMARY_VERSION = "offline-extractive-1"
MAX_SENTENCE_TOKENS = 80
PREVIOUS_SHARE = 0.5
SIMILAR = 0.6
LABELS = {"user": "User", "assistant": "Assistant"}

STOP_WORDS = frozenset(
    """a about above after again against all also am an and any are aren't as at be because been before
    being below between both but by can can't cannot could couldn't did didn't do does doesn't doing don't
    down during each few for from further had hadn't has hasn't have haven't having he he'd he'll he's her
    here here's hers herself him himself his how how's i i'd i'll i'm i've if in into is isn't it it's its
    itself just let's me more most mustn't my myself no nor not now of off on once only or other ought our
    ours ourselves out over own same shan't she she'd she'll she's should shouldn't so some such than that
    that's the their theirs them themselves then there there's these they they'd they'll they're they've
    this those through to too under until up very was wasn't we we'd we'll we're we've were weren't what
    what's when when's where where's which while who who's whom why why's with won't would wouldn't you
    you'd you'll you're you've your yours yourself yourselves ok okay yes yeah sure thanks thank please
    hi hello hey great good well really just like get got one also user assistant""".split()
)
_WORD = re.compile(r"[^\W_][\w'\u2019-]*", re.UNICODE)
_ASCII_WORD = re.compile(r"[^\W_](?:[\w'-]*\w)?")
_CODE_BLOCK = re.compile(r"```.*?(?:```|$)", re.DOTALL)
_LABEL = re.compile(r"^(?:User|Assistant):\s*")
_DECISION = re.compile(
    r"\b(?:decid\w*|agree\w*|will|going to|plan\w*|deadline|due|must|need\w*|chose|choos\w*|"
    r"prefer\w*|want\w*|remember|todo|next step\w*|confirm\w*|approv\w*|budget|goal\w*)\b",
    re.IGNORECASE,
)
_FIRST_PERSON = re.compile(r"\b(?:i|i'm|my|we|our|me)\b", re.IGNORECASE)
_NUMBER = re.compile(r"\d")


def content_terms(text: str) -> list[str]:
    """Lower-cased words of `text` minus stop words (numbers kept)."""
    if text.isascii():
        # the same words, found in the lower-cased text at once (ASCII lower-casing maps letters to
        # letters, so word boundaries do not move) and without the trailing ' and - strip removes
        words: Iterable[str] = _ASCII_WORD.findall(text.lower())
    else:
        words = (w.lower().replace("\u2019", "'").strip("'-") for w in _WORD.findall(text))
    return [w for w in words if w and w not in STOP_WORDS and (len(w) > 1 or w.isdigit())]


def _has_name(sentence: str) -> bool:
    words = _WORD.findall(_LABEL.sub("", sentence))
    return any(w[0].isupper() and w not in ("I", "I'm", "I\u2019m") for w in words[1:])


@dataclass
class _Candidate:
    text: str
    terms: frozenset[str]
    from_previous: bool
    order: int
    bonus: float
    tokens: int
    score: float = 0.0


def _candidate(text: str, *, from_previous: bool, order: int, bonus: float) -> _Candidate | None:
    terms = content_terms(text)
    if len(set(terms)) < 2:
        return None
    tokens = count_tokens(text)
    if tokens > MAX_SENTENCE_TOKENS:
        text = truncate_to_tokens(text, MAX_SENTENCE_TOKENS)
        if not text:
            return None
        tokens = count_tokens(text)
    return _Candidate(text, frozenset(terms), from_previous, order, bonus, tokens + 1)


def _message_candidates(messages: Sequence[Message], start: int) -> list[_Candidate]:
    speaking = [m for m in messages if m.role in LABELS and m.content]
    out: list[_Candidate] = []
    for index, message in enumerate(speaking):
        recency = 0.9 + 0.2 * (index / (len(speaking) - 1) if len(speaking) > 1 else 1.0)
        is_user = message.role == "user"
        for sentence in split_sentences(_CODE_BLOCK.sub(" ", message.content)):
            bonus = recency * (1.25 if is_user else 1.0)
            if is_user and _FIRST_PERSON.search(sentence):
                bonus *= 1.1
            if sentence.endswith("?"):
                bonus *= 0.8 if is_user else 0.6
            found = _candidate(
                f"{LABELS[message.role]}: {sentence}",
                from_previous=False,
                order=start + len(out),
                bonus=bonus,
            )
            if found is not None:
                out.append(found)
    return out


def _score(candidates: list[_Candidate], frequency: Counter[str]) -> None:
    for c in candidates:
        base = sum(1.0 + math.log(frequency[t]) for t in c.terms) / math.sqrt(len(c.terms))
        factor = c.bonus
        if _NUMBER.search(c.text):
            factor *= 1.2
        if _has_name(c.text):
            factor *= 1.15
        if _DECISION.search(c.text):
            factor *= 1.3
        c.score = base * factor


def _similar(a: frozenset[str], b: frozenset[str]) -> bool:
    return len(a & b) / len(a | b) >= SIMILAR


def _select(candidates: list[_Candidate], previous_cap: int, new_cap: int, budget: int) -> list[_Candidate]:
    ranked = sorted(candidates, key=lambda c: (-c.score, c.order))
    chosen: list[_Candidate] = []
    used = {True: 0, False: 0}

    def take(c: _Candidate, limit: int) -> None:
        if (
            c in chosen
            or used[True] + used[False] + c.tokens > budget
            or used[c.from_previous] + c.tokens > limit
        ):
            return
        if any(_similar(c.terms, other.terms) for other in chosen):
            return
        chosen.append(c)
        used[c.from_previous] += c.tokens

    for c in ranked:  # each side within its share
        take(c, previous_cap if c.from_previous else new_cap)
    for c in ranked:  # then whatever room is left
        take(c, budget)
    return chosen


def _render(chosen: list[_Candidate]) -> str:
    return "\n".join(c.text for c in sorted(chosen, key=lambda c: c.order))


def extractive_summary(previous: str | None, messages: Sequence[Message], max_tokens: int) -> str:
    """The new summary text (module doc); "" when nothing has two content words."""
    if max_tokens < 1:
        raise ValueError("max_tokens must be >= 1")
    old: list[_Candidate] = []
    seen: set[str] = set()
    for sentence in split_sentences(previous or ""):
        if sentence in seen:
            continue
        seen.add(sentence)
        found = _candidate(sentence, from_previous=True, order=len(old), bonus=1.0)
        if found is not None:
            old.append(found)
    new = _message_candidates(messages, start=len(old))
    candidates = old + new
    if not candidates:
        return ""
    frequency: Counter[str] = Counter()
    for sentence in split_sentences(previous or ""):
        frequency.update(content_terms(sentence))
    for message in messages:
        if message.role in LABELS:
            frequency.update(content_terms(_CODE_BLOCK.sub(" ", message.content)))
    for c in candidates:  # a truncated sentence's terms are all counted at least once
        frequency.update(t for t in c.terms if frequency[t] == 0)
    _score(candidates, frequency)
    previous_cap = int(max_tokens * PREVIOUS_SHARE) if new else max_tokens
    new_cap = max_tokens - previous_cap if old else max_tokens
    chosen = _select(candidates, previous_cap, new_cap, max_tokens)
    text = _render(chosen)
    while chosen and count_tokens(text) > max_tokens:  # BPE merges across lines: re-check the whole
        chosen.remove(min(chosen, key=lambda c: (c.score, -c.order)))
        text = _render(chosen)
    if not chosen:
        best = min(candidates, key=lambda c: (-c.score, c.order))
        text = truncate_to_tokens(best.text, max_tokens)
    return text
