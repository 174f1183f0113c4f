"""Search terms of a text: what transcript search indexes and matches, the same at projection
time (`messages.terms`) and at query time.

`terms(text)`, in text order, repeats kept (BM25 counts them):
1. NFKC-normalised (fullwidth `A` is `A`, the ligature `fi` is `fi`), then lower-cased (`str.lower`);
2. words: maximal runs of Unicode letters, digits and combining marks (category M: the vowel signs
   of Devanagari, Thai, ...; `[^\\W_]` alone would split `नमस्ते`), where an apostrophe between
   two such runs stays inside the word (`don't`, `caroline's`; the typographic U+2019 is read as
   `'`), as Snowball's stop list expects; everything else separates words;
3. stop words dropped: the Snowball project's English stop-word list (`STOP_WORDS`, below), which
   has the contractions (`don't`, `i'm`);
4. a word kept that has apostrophes loses a possessive `'s` and is split at the others
   (`caroline's` -> `caroline`, `l'école` -> `l`, `école`; `o'clock` -> `o`, `clock`), the parts
   that are stop words dropped: elisions of other languages still match their words;
5. each remaining word stemmed by the Snowball English stemmer (PyStemmer, MIT/BSD): `groups` ->
   `group`, `caroline` -> `carolin`. Words of other scripts pass through the English stemmer
   unchanged or nearly so: they are still matched exactly.

`query_terms(text)`: the distinct terms in order, at most `MAX_QUERY_TERMS`. A text of stop words
only has no terms (search then finds nothing: no word of it says what to look for).

Pure and deterministic (the stemmer is a pure function; one stemmer per thread, as PyStemmer's
objects are not thread-safe); never raises on a `str` (lone surrogates are words like any other
character outside `\\W`). Not idempotent on its own output: a Snowball stem may stem again
(`agreed` -> `agre` -> `agr`); terms are made once, from the text, on both sides.

The stop words are those of https://snowballstem.org/algorithms/english/stop.txt (the words at
the start of a line; commented-out words such as `us`, `will`, `can` are not stop words):
Copyright (c) 2001, Dr Martin Porter; Copyright (c) 2002, Richard Boulton; BSD 3-clause licence.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from itertools import chain
from typing import cast

import Stemmer

STOP_WORDS: frozenset[str] = frozenset(
    """
    i me my myself we our ours ourselves you your yours yourself yourselves he him his himself she
    her hers herself it its itself they them their theirs themselves what which who whom this that
    these those am is are was were be been being have has had having do does did doing would should
    could ought i'm you're he's she's it's we're they're i've you've we've they've i'd you'd he'd
    she'd we'd they'd i'll you'll he'll she'll we'll they'll isn't aren't wasn't weren't hasn't
    haven't hadn't doesn't don't didn't won't wouldn't shan't shouldn't can't cannot couldn't
    mustn't let's that's who's what's here's there's when's where's why's how's a an the and but if
    or because as until while of at by for with about against between into through during before
    after above below to from up down in out on off over under again further then once here there
    when where why how all any both each few more most other some such no nor not only own same so
    than too very
    """.split()
)
"""The Snowball English stop-word list (module doc), lower-case, apostrophes as `'`."""

MAX_QUERY_TERMS = 64
INDEXED_ROLES = ("user", "assistant")
"""The roles whose messages have terms: the ones search returns (`core.transcripts.search`)."""


def _mark_class() -> str:
    """A regex class body of the combining marks (Unicode category M) of planes 0-1, plus the
    variation selectors supplement: built once at import (~0.1 s)."""
    ranges: list[tuple[int, int]] = []
    for cp in range(0x20000):
        if unicodedata.category(chr(cp))[0] == "M":
            if ranges and ranges[-1][1] == cp - 1:
                ranges[-1] = (ranges[-1][0], cp)
            else:
                ranges.append((cp, cp))
    ranges.append((0xE0100, 0xE01EF))
    return "".join(f"\\U{low:08x}-\\U{high:08x}" for low, high in ranges)


_CHAR = rf"[\w{_mark_class()}]"  # `_` is made a space first
_WORD_RE = re.compile(rf"{_CHAR}+(?:'{_CHAR}+)*")
_ASCII_WORD_RE = re.compile(r"[a-z0-9]+(?:'[a-z0-9]+)*")  # the same on ASCII text
_ASCII_TABLE = bytes(
    c + 32 if 65 <= c <= 90 else c if (48 <= c <= 57 or 97 <= c <= 122 or c == 39) else 32 for c in range(256)
)
"""ASCII text to lower-case letters, digits and apostrophes, everything else a space."""
_SEPARATORS = str.maketrans({"\u2019": "'", "_": " "})
_local = threading.local()

CACHE_WORDS = 50_000
_CACHE: dict[str, tuple[str, ...]] = {}
"""word -> its terms: a word's terms never change, so this only saves the stemmer's calls (~7x
faster on conversation text; emptied whole when full; dict reads and writes are atomic)."""


def _stemmer() -> Stemmer.Stemmer:
    stemmer: Stemmer.Stemmer | None = getattr(_local, "stemmer", None)
    if stemmer is None:
        stemmer = Stemmer.Stemmer("english")
        _local.stemmer = stemmer
    return stemmer


def words(text: str) -> list[str]:
    """The lower-cased words of `text` (steps 1-2 of the module doc), stop words included."""
    if text.isascii():  # the same words, ~3x faster: bytes.translate and split run in C
        folded = text.encode("ascii").translate(_ASCII_TABLE).decode("ascii")
        if "'" not in text:
            return folded.split()
        return _ASCII_WORD_RE.findall(folded)  # a word never spans a space: the same as per token
    return _WORD_RE.findall(unicodedata.normalize("NFKC", text).lower().translate(_SEPARATORS))


def _word_terms(word: str) -> tuple[str, ...]:
    """The terms of one word (steps 3-5 of the module doc)."""
    if word in STOP_WORDS:
        return ()
    if "'" not in word:
        return (_stemmer().stemWord(word),)
    if word.endswith("'s"):
        word = word[:-2]
    parts = [part for part in word.split("'") if part not in STOP_WORDS]
    return tuple(_stemmer().stemWords(parts)) if parts else ()


def terms(text: str) -> list[str]:
    """The search terms of `text`, in order, repeats kept (module doc)."""
    found = words(text)
    cached = list(map(_CACHE.get, found))
    if None in cached:
        if len(_CACHE) >= CACHE_WORDS:
            _CACHE.clear()
        for i, value in enumerate(cached):
            if value is None:
                cached[i] = _CACHE[found[i]] = _word_terms(found[i])
    return list(chain.from_iterable(cast(list[tuple[str, ...]], cached)))


def query_terms(text: str) -> list[str]:
    """The distinct search terms of `text`, in order of first appearance, at most
    `MAX_QUERY_TERMS` ([] when it has none: only stop words, or no word at all)."""
    return list(dict.fromkeys(terms(text)))[:MAX_QUERY_TERMS]


def message_terms(role: str, content: str) -> tuple[str, ...]:
    """The stored terms of a message: `terms(content)` for the `INDEXED_ROLES`, () for the others
    (system prompts and tool traffic are never search results: their terms would only cost)."""
    return tuple(terms(content)) if role in INDEXED_ROLES else ()
