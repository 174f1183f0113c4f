"""Search terms (`core.transcripts.terms`): words, Snowball stop words and stems, query terms."""

from __future__ import annotations

import threading

from hypothesis import given
from hypothesis import strategies as st

from core.transcripts.terms import MAX_QUERY_TERMS, STOP_WORDS, query_terms, terms, words


def test_lower_cases_splits_drops_stop_words_and_stems() -> None:
    assert terms("When did Caroline go to the LGBTQ support groups?") == [
        "carolin",
        "go",
        "lgbtq",
        "support",
        "group",
    ]
    assert terms("running, runs; ran-run") == ["run", "run", "ran", "run"]  # repeats kept, in order


def test_apostrophes_stay_inside_words() -> None:
    assert words("Don\u2019t stop: Caroline's o'clock 'quoted'") == [
        "don't",
        "stop",
        "caroline's",
        "o'clock",
        "quoted",
    ]
    assert terms("I'm sure she's at Caroline\u2019s") == ["sure", "carolin"]  # contractions are stop words
    assert terms("Caroline's") == terms("Caroline")  # the possessive goes
    assert terms("l'école d'art o'clock rock'n'roll") == [
        "l",
        "école",
        "d",
        "art",
        "o",
        "clock",
        "rock",
        "n",
        "roll",
    ]


def test_splits_on_underscores_and_punctuation_keeps_digits() -> None:
    assert terms("tool_call-42 v2.0 2023/05/07") == ["tool", "call", "42", "v2", "0", "2023", "05", "07"]


def test_stop_words_are_snowballs_only() -> None:
    assert {"the", "and", "when", "don't", "very"} <= STOP_WORDS
    # Snowball comments these out (homonyms: a will, a can, the US): they stay search terms
    assert not {"us", "will", "can", "may", "must", "might", "one", "never"} & STOP_WORDS
    assert terms("the tin can and the US will") == ["tin", "can", "us", "will"]


def test_other_scripts_and_odd_strings() -> None:
    assert terms("Straße 東京タワー 2023年 café") == ["straße", "東京タワー", "2023年", "café"]
    # combining marks stay inside words (Devanagari vowel signs, a decomposed accent)
    assert terms("नमस्ते दुनिया") == ["नमस्ते", "दुनिया"]
    assert terms("cafe\u0301 İstanbul") == terms("café i\u0307stanbul")
    # NFKC: fullwidth letters and ligatures are the plain ones
    assert terms("\uff21\uff22\uff23 \ufb01sh") == ["abc", "fish"]
    assert terms("") == []
    assert terms("\ud800 \x00 \U0001f600 ...") == []  # a lone surrogate, NUL, an emoji: no word


def test_only_stop_words_have_no_terms() -> None:
    assert terms("What is it that they were doing?") == []
    assert query_terms("to be or not to be") == []


def test_query_terms_are_distinct_in_order_and_capped() -> None:
    assert query_terms("groups, group; GROUPING support") == ["group", "support"]
    many = " ".join(f"w{i}" for i in range(MAX_QUERY_TERMS + 10))
    assert query_terms(many) == [f"w{i}" for i in range(MAX_QUERY_TERMS)]


def test_each_thread_has_its_own_stemmer() -> None:
    text = "connections connected connecting " * 50
    expected = terms(text)
    results: list[list[str]] = []

    def work() -> None:
        for _ in range(200):
            results.append(terms(text))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 800 and all(result == expected for result in results)


@given(st.text())
def test_never_raises_and_is_deterministic(text: str) -> None:
    first = terms(text)
    assert first == terms(text)
    assert all(term and term == term.lower() for term in first)


@given(st.text(alphabet=st.characters(codec="ascii")))
def test_ascii_text_has_the_words_of_the_unicode_path(text: str) -> None:
    from core.transcripts import terms as module

    assert words(text) == module._WORD_RE.findall(text.lower().translate(module._SEPARATORS))


@given(st.text())
def test_query_terms_are_the_distinct_terms(text: str) -> None:
    found = query_terms(text)
    assert len(found) == len(set(found)) <= MAX_QUERY_TERMS
    assert found == list(dict.fromkeys(terms(text)))[:MAX_QUERY_TERMS]


@given(st.lists(st.sampled_from(sorted(STOP_WORDS))))
def test_stop_words_alone_never_give_terms(stop: list[str]) -> None:
    assert terms(" ".join(stop)) == []
    assert terms(" ".join(word.upper().replace("'", "\u2019") for word in stop)) == []


@given(st.text())
def test_terms_of_terms_are_words_of_the_terms(text: str) -> None:
    """Each term is one word (re-reading a term splits nothing), though not a fixed point of the
    stemmer (module doc)."""
    for term in terms(text):
        assert words(term) == [term]
