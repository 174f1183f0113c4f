"""The offline fact extractor: conservative rules for explicit self-statements of the user.

Only `user` messages are read. Before matching, text the user did not state themselves is
removed: code (fenced and inline), quoted spans ("...", “...”, «...») and `>` quote lines. A
sentence is skipped entirely when it is a question, hypothetical or uncertain ("if", "would",
"imagine", "maybe", "I think" ...), or reports someone else's words ("said", "told" ...). What
is left is split into clauses ("..., and I ...", "; ") and a clause counts only when it *starts*
with one of these statements (after greetings such as "Hi," or "Btw,") and contains no negation
("not", "n't", "never", "no longer", "anymore"):

| statement                                   | key                          | importance |
|---------------------------------------------|------------------------------|------------|
| my name is X / I'm called X                 | user.name                    | 0.8        |
| call me X                                   | user.preferred_name          | 0.8        |
| I live in X / I'm based in X                | user.location                | 0.7        |
| I work at X / I work for X                  | user.employer                | 0.7        |
| I work as (a/an) X                          | user.occupation              | 0.7        |
| I'm a/an X / I am a/an X                    | user.identity.<slug>         | 0.6        |
| I prefer/like/love/enjoy/hate/dislike X     | user.preference.<slug>       | 0.7        |

Names, places and employers must be capitalised words (`my name is bob` is not taken); other
objects are short phrases cut at the first conjunction or preposition that starts a new idea,
and objects that only point at the conversation ("I like it", "I love how ...") are not taken.
Every fact is `user_profile`, phrased in the third person, with the ids of the messages it came
from; a later statement with the same key replaces an earlier one (same text: ids are merged).
Screening of sensitive content is left to agent memory's write path.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from core.chat.base import ExtractedFact
from core.chat.text import split_sentences
from core.journal.models import Message

_REMOVE = [
    re.compile(r"```.*?(?:```|$)", re.DOTALL),
    re.compile(r"`[^`\n]*`"),
    re.compile(r'"[^"\n]*"'),
    re.compile(r"“[^”\n]*”"),
    re.compile(r"«[^»\n]*»"),
    re.compile(r"^\s*>.*$", re.MULTILINE),
]
_QUESTION_START = re.compile(
    r"^(?:do|does|did|am|is|are|was|were|can|could|should|would|will|shall|may|what|why|how|when|"
    r"where|who|whom|whose|which)\b",
    re.IGNORECASE,
)
_HYPOTHETICAL = re.compile(
    r"\b(?:if|would|wouldn't|i'd|suppose|supposing|imagine|imagining|pretend|pretending|hypothetical\w*|"
    r"maybe|perhaps|might|could|wish|assume|assuming|let's say|what if|as if|role-?play\w*|act as|"
    r"fiction\w*|story|character|i think|i guess|i believe|probably|someday|one day|unless)\b",
    re.IGNORECASE,
)
_REPORTED = re.compile(
    r"\b(?:said|says|say|told|tells|tell|wrote|writes|asked|asks|quote\w*|according|claims?|claimed)\b",
    re.IGNORECASE,
)
_NEGATION = re.compile(r"\b(?:not|never|no longer|anymore|nobody|nothing|no)\b|n't\b", re.IGNORECASE)
_LEAD = re.compile(
    r"^(?:(?:hi|hello|hey|well|ok|okay|so|also|actually|btw|by the way|oh|and|anyway|fyi|just so you know|"
    r"for the record|as you know)\b[\s,!.:;-]*)+",
    re.IGNORECASE,
)
_CLAUSES = re.compile(r"\s*;\s*|,?\s+(?:and|but)\s+(?=(?:i|my|i'm)\b)", re.IGNORECASE)
_END_PUNCT = ".,!;:…)"

_CONNECTORS = frozenset({"of", "de", "del", "da", "la", "le", "am", "upon", "on", "&", "and"})
_PHRASE_STOP = frozenset(
    """at in for from and but with who which that because so since on when where while to like by if
    as though although or than until after before during now""".split()
)
_VAGUE_OBJECTS = frozenset(
    """it that this these those them you your him her his their what how when where why the way being
    something anything everything everyone someone it's that's""".split()
)
_NOT_IDENTITY = frozenset(
    """bit little lot fan big huge total sort kind tad good bad great fast slow quick real complete
    fool""".split()
)
_SLUG_STOP = frozenset("a an the to of and or for my with in on at over than".split())


def _clean(text: str) -> str:
    text = text.replace("\u2019", "'").replace("\u2018", "'")
    for pattern in _REMOVE:
        text = pattern.sub(" ", text)
    return text


def _words(text: str) -> list[str]:
    return text.strip().rstrip(_END_PUNCT).split()


def _capitalised(word: str) -> bool:
    core = word.rstrip(",")
    return bool(core) and core[0].isupper() and all(ch.isalpha() or ch in "-'." for ch in core)


def _proper(text: str, max_words: int) -> str | None:
    """Leading capitalised words (connectors allowed between them, commas kept), or None."""
    taken: list[str] = []
    for word in _words(text):
        if _capitalised(word):
            taken.append(word)
            if word.endswith(","):
                continue
        elif word.lower() in _CONNECTORS and taken and not taken[-1].endswith(","):
            taken.append(word)
            continue
        else:
            break
        if len(taken) > max_words:
            return None
    while taken and (taken[-1].lower() in _CONNECTORS or taken[-1].endswith(",")):
        last = taken.pop()
        if last.endswith(","):
            break
    if not taken or len(taken) > max_words:
        return None
    return " ".join(taken).rstrip(",")


def _name(text: str) -> str | None:
    """1-3 leading capitalised words, up to a comma or the first other word."""
    taken: list[str] = []
    for word in _words(text):
        if not _capitalised(word):
            break
        taken.append(word.rstrip(","))
        if word.endswith(","):
            break
    return " ".join(taken) if 1 <= len(taken) <= 3 else None


def _phrase(text: str, max_words: int) -> str | None:
    """A short object phrase: up to `max_words` words, cut at a stop word or punctuation."""
    taken: list[str] = []
    for raw in text.strip().split():
        word = raw.rstrip(_END_PUNCT)
        if word.lower() in _PHRASE_STOP and taken:
            break
        if word:
            taken.append(word)
        if word != raw or len(taken) > max_words:
            break
    if not taken or len(taken) > max_words or taken[0].lower() in _VAGUE_OBJECTS:
        return None
    if " ".join(taken[:2]).lower() in _VAGUE_OBJECTS:
        return None
    return " ".join(taken)


def slug(text: str, max_words: int = 4) -> str:
    """`Dark roast coffee` -> `dark-roast-coffee`: ASCII-folded, lower-case, filler words dropped."""
    folded = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode().lower()
    words = [w for w in re.findall(r"[a-z0-9]+", folded) if w not in _SLUG_STOP]
    return "-".join(words[:max_words])[:60].strip("-")


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern[str]
    build: Callable[[re.Match[str]], tuple[str, str, float] | None]  # (key, content, importance)


def _name_rule(m: re.Match[str]) -> tuple[str, str, float] | None:
    name = _name(m["x"])
    return None if name is None else ("user.name", f"The user's name is {name}.", 0.8)


def _preferred_rule(m: re.Match[str]) -> tuple[str, str, float] | None:
    name = _name(m["x"])
    return None if name is None else ("user.preferred_name", f"The user wants to be called {name}.", 0.8)


def _location_rule(m: re.Match[str]) -> tuple[str, str, float] | None:
    place = _proper(m["x"], 5)
    return None if place is None else ("user.location", f"The user lives in {place}.", 0.7)


def _employer_rule(m: re.Match[str]) -> tuple[str, str, float] | None:
    employer = _proper(m["x"], 5)
    return None if employer is None else ("user.employer", f"The user works at {employer}.", 0.7)


def _occupation_rule(m: re.Match[str]) -> tuple[str, str, float] | None:
    job = _phrase(m["x"], 4)
    if job is None or job.split()[0].lower() in _NOT_IDENTITY:
        return None
    article = f"{m['a']} " if m["a"] else ""
    return "user.occupation", f"The user works as {article}{job}.", 0.7


def _identity_rule(m: re.Match[str]) -> tuple[str, str, float] | None:
    what = _phrase(m["x"], 4)
    if what is None or what.split()[0].lower() in _NOT_IDENTITY or not slug(what):
        return None
    return f"user.identity.{slug(what)}", f"The user is {m['a'].lower()} {what}.", 0.6


_VERB_FORMS = {"prefer": "prefers", "like": "likes", "love": "loves", "enjoy": "enjoys", "hate": "hates",
               "dislike": "dislikes"}  # fmt: skip


def _preference_rule(m: re.Match[str]) -> tuple[str, str, float] | None:
    what = _phrase(m["x"], 6)
    if what is None or not slug(what):
        return None
    verb = _VERB_FORMS[m["verb"].lower()]
    return f"user.preference.{slug(what)}", f"The user {verb} {what}.", 0.7


_I_AM = r"(?:i'm|i am)"
RULES: tuple[_Rule, ...] = (
    _Rule(re.compile(rf"^(?:my name is|{_I_AM} called)\s+(?P<x>.+)$", re.I), _name_rule),
    _Rule(re.compile(r"^(?:please\s+)?call me\s+(?P<x>.+)$", re.I), _preferred_rule),
    _Rule(re.compile(rf"^(?:i live in|{_I_AM} (?:based|living) in)\s+(?P<x>.+)$", re.I), _location_rule),
    _Rule(re.compile(r"^i work (?:at|for)\s+(?P<x>.+)$", re.I), _employer_rule),
    _Rule(re.compile(r"^i work as\s+(?:(?P<a>an?)\s+)?(?P<x>.+)$", re.I), _occupation_rule),
    _Rule(re.compile(rf"^{_I_AM}\s+(?P<a>an?)\s+(?P<x>.+)$", re.I), _identity_rule),
    _Rule(
        re.compile(
            r"^i (?:really |absolutely |much |strongly )?"
            r"(?P<verb>prefer|like|love|enjoy|hate|dislike)\s+(?P<x>.+)$",
            re.I,
        ),
        _preference_rule,
    ),
)


def _statements(text: str) -> list[tuple[str, str, float]]:
    found: list[tuple[str, str, float]] = []
    for sentence in split_sentences(_clean(text)):
        if sentence.endswith("?") or _QUESTION_START.match(sentence):
            continue
        if _HYPOTHETICAL.search(sentence) or _REPORTED.search(sentence):
            continue
        for clause in _CLAUSES.split(sentence):
            clause = _LEAD.sub("", clause).strip()
            if not clause or _NEGATION.search(clause):
                continue
            for rule in RULES:
                match = rule.pattern.match(clause)
                if match is not None:
                    built = rule.build(match)
                    if built is not None:
                        found.append(built)
                    break
    return found


def extract_user_facts(messages: Sequence[Message]) -> list[ExtractedFact]:
    """The facts of the table above, in order of their latest statement (module doc)."""
    by_key: dict[str, tuple[str, float, list[str]]] = {}
    for message in messages:
        if message.role != "user":
            continue
        for key, content, importance in _statements(message.content):
            previous = by_key.pop(key, None)
            ids = [message.message_id]
            if previous is not None and previous[0] == content:
                ids = [*previous[2], *(i for i in ids if i not in previous[2])]
            by_key[key] = (content, importance, ids)
    return [
        ExtractedFact(
            key=key, content=content, category="user_profile", importance=importance, message_ids=tuple(ids)
        )
        for key, (content, importance, ids) in by_key.items()
    ]
