r"""Write-time screening of memory entries: pure functions, no I/O.

Two outcomes for text about to be stored (content, and the key):
- **rejected** (`ScreeningRejected`, naming the pattern): prompt-injection shapes that must never be
  replayed into a prompt - "ignore previous instructions" and its variants ("disregard all prior
  rules", "forget your instructions", "ignore everything above"...), "you are now ...", a line
  starting with a `system:` or `assistant:` role label (after any line break, carriage return and
  U+2028 included, and after markdown: `#`, `>`, `-`, `1.`, `**system**:`), chat-template tokens
  (ChatML `<|im_start|>`, `[INST]`, `<<SYS>>` ...), zero-width characters, bidirectional override
  characters, invisible tag characters (hidden ASCII text; an emoji flag's tag sequence is
  fine), and curl/wget/HTTPie commands carrying credentials (auth headers, cookies, `-u
  user:pass`, `user:pass@` URLs, `--oauth2-bearer`..., also across `\` line continuations);
- **sensitive** (`find_sensitive`, `core.memory.sensitive`: credentials and personal data).
  Sensitive text is not rejected: the caller stores it `private`; only when there is no user to
  make it private is it refused (`SensitiveWithoutUser`).

Matching runs on the folded text (`core.memory.folding.fold`: NFKC, every invisible format
character and combining mark dropped, Cyrillic/Greek look-alikes mapped to Latin), case-
insensitively where it makes sense, so homoglyph, soft-hyphen or zero-width variants of a phrase
are caught; the invisible-character rules look at the raw text. Screening only decides: the
stored text is exactly what was sent. The checks are deliberately narrow: each has near misses
that pass (tests/core/memory/test_screening.py, test_screening_variants.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from core.errors import InvalidInput
from core.memory.folding import fold
from core.memory.sensitive import (
    SENSITIVE_DESCRIPTIONS,
    Rule,
    find_sensitive,
    first,
    iban_ok,
    luhn_ok,
)

__all__ = [
    "SENSITIVE_DESCRIPTIONS",
    "Screening",
    "ScreeningRejected",
    "SensitiveWithoutUser",
    "check_rejected",
    "find_sensitive",
    "iban_ok",
    "luhn_ok",
    "screen",
]


class ScreeningRejected(InvalidInput):
    """The text matches a rejected pattern (`pattern` names it); nothing was written."""

    code = "screening_rejected"

    def __init__(self, message: str, *, pattern: str, field: str | None = None) -> None:
        super().__init__(message, field=field)
        self.pattern = pattern


class SensitiveWithoutUser(ScreeningRejected):
    """Sensitive text (`pattern`) with no authenticated user to keep it private; nothing was written."""

    code = "sensitive_without_user"


# ---- rejected patterns ----------------------------------------------------------------------------

_VERBS = r"(?:ignore|disregard|forget|skip|override|bypass|drop)"
_QUANT = r"(?:(?:all|any|the|your|my|of|every|these|those|each)\s+)"
_QUALIFIER = r"(?:previous|prior|above|earlier|preceding|foregoing|former|past|initial|original|system)"
_NOUN = r"(?:instructions?|rules?|prompts?|directions?|directives?|guidelines?|guidance|commands?|orders?)"

_OWN_NOUN = r"(?:instructions?|rules?|prompts?|directives?|guidelines?|guidance|programming|system\s+prompt)"
_EARLIER = (
    r"(?:above|before\s+this|earlier|previously|so\s+far"
    r"|(?:you(?:'ve|\u2019ve|\s+have|\s+were|\s+have\s+been)\s+(?:been\s+)?(?:told|given)))"
)

_IGNORE_PREVIOUS = re.compile(
    rf"\b{_VERBS}\s+{_QUANT}*(?:{_QUALIFIER}\s+{_NOUN}"  # ignore (all) (the) previous instructions
    rf"|(?:all|any|every)\s+{_NOUN}"  # ignore all instructions
    rf"|{_NOUN}\s+(?:above|before|given\s+(?:above|before|earlier)))\b"  # ignore the rules above
    rf"|\b{_VERBS}\s+(?:all\s+)?your\s+(?:{_QUALIFIER}\s+)?{_OWN_NOUN}\b"  # forget your rules
    rf"|\b{_VERBS}\s+(?:everything|anything|all)\s+(?:(?:written|said|stated)\s+)?{_EARLIER}",
    re.IGNORECASE,
)
_YOU_ARE_NOW = re.compile(r"\byou(?:\s+are|'re|\u2019re)\s+now\b", re.IGNORECASE)
_LINE_BREAKS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"
"""Every character that starts a new line somewhere (str.splitlines' set): a role label after any
of them is at a line start for whoever renders the text."""
_MARKDOWN_LEAD = r"[ \t]*(?:(?:[#>*+|-]|\d{1,3}[.)])[ \t]*)*(?:\*{1,3}|_{1,3}|`{1,3}|~~|\[)?[ \t]*"
"""What markdown may put before a label at a line start: headings, quotes, list items and
table bars, then an opening emphasis, code span or bracket (`### **system**:`)."""


def _role_label(roles: str) -> re.Pattern[str]:
    """A line starting with one of `roles` as a chat label (`system:`), after markdown."""
    return re.compile(
        rf"(?:^|(?<=[{_LINE_BREAKS}])){_MARKDOWN_LEAD}(?:{roles})[ \t]*(?:\*{{1,3}}|_{{1,3}}|`{{1,3}}|~~|\])?"
        r"[ \t]*:",
        re.IGNORECASE,
    )


_LEADING_SYSTEM = _role_label("system")
_LEADING_ROLE = _role_label("assistant|developer")
_CHAT_TEMPLATE = re.compile(
    r"<\|\s*(?:im_start|im_end|im_sep|endoftext|system|user|assistant|eot_id|start_header_id"
    r"|end_header_id|begin_of_text|end_of_text)\s*\|>"  # ChatML, Llama 3, Phi/Zephyr
    r"|<(?:start|end)_of_turn>"  # Gemma
    r"|\[/?INST\]|<</?SYS>>",  # Llama 2
    re.IGNORECASE,
)
_ZERO_WIDTH = re.compile("[\u200b\u200c\u200d\u2060\ufeff]")
_BIDI = re.compile("[\u202a-\u202e\u2066-\u2069]")
_EMOJI_TAG_SEQUENCE = re.compile("\U0001f3f4[\U000e0020-\U000e007e]+\U000e007f")
"""A subdivision flag (🏴 + tag letters + cancel tag, e.g. Scotland): the one legitimate use of
tag characters."""
_TAG = re.compile("[\U000e0000-\U000e007f]")

_CONTINUATION = r"[\\`^][ \t]*\r?\n"
"""A shell line continuation (a backslash in sh, a backtick in PowerShell, a caret in cmd)
before a newline."""
_COMMAND_REST = rf"(?:{_CONTINUATION}|'[^'\n]*'|\"[^\"\n]*\"|[^\n;|&])*"
"""The rest of a command: up to the end of its line (across continuations) or a command
separator; quoted arguments are taken whole (a quoted `&` in a URL does not end the command)."""
_CURL = re.compile(rf"\b(?:curl|wget)\b{_COMMAND_REST}", re.IGNORECASE)
_HTTPIE = re.compile(rf"(?<![\w./:@-])(?:https?|xhs?)(?=[ \t]){_COMMAND_REST}")
_AUTH_HEADER_NAMES = r"(?:proxy-)?authorization|x-api-key|api-key|x-auth-token|cookie|private-token"
_URL_CREDENTIALS = r"[a-z][a-z0-9+.-]*://[^/\s:@'\"]+:[^/\s@'\"]+@"
_CURL_AUTH = re.compile(
    rf"(?:-H|--header)(?:\s+|=)?['\"]?\s*(?:{_AUTH_HEADER_NAMES})\s*:"  # -H "Authorization: ..."
    r"|(?:^|\s)(?:-u|--user|--proxy-user)(?:\s+|=)['\"]?[^\s'\":]*:"  # -u user:pass
    r"|(?:^|\s)(?:-b|--cookie)(?:\s+|=)['\"]?[^\s'\"=;]+="  # -b "session=..." (not a cookie file)
    r"|--oauth2-bearer\b|--(?:http-|ftp-|proxy-)?password\b|--aws-sigv4\b"
    rf"|{_URL_CREDENTIALS}",  # https://user:pass@host
    re.IGNORECASE,
)
_HTTPIE_AUTH = re.compile(
    rf"(?:^|\s)['\"]?(?:{_AUTH_HEADER_NAMES})\s*:(?!=)"  # Authorization:'Bearer ...' (a header item)
    r"|(?:^|\s)(?:-a|--auth)(?:\s+|=)\S"  # -a user:pass, --auth=token
    rf"|{_URL_CREDENTIALS}",
    re.IGNORECASE,
)


def _command_with_auth(text: str) -> str | None:
    for command, auth in ((_CURL, _CURL_AUTH), (_HTTPIE, _HTTPIE_AUTH)):
        for match in command.finditer(text):
            if auth.search(match.group(0)):
                return match.group(0)[:40]
    return None


def _hidden_tags(text: str) -> str | None:
    return first(_TAG, _EMOJI_TAG_SEQUENCE.sub("", text))


_RAW_REJECTIONS: tuple[Rule, ...] = (
    Rule("zero_width", "contains a zero-width character", lambda t: first(_ZERO_WIDTH, t)),
    Rule("bidi_override", "contains a bidirectional override character", lambda t: first(_BIDI, t)),
    Rule("tag_characters", "contains invisible tag characters (hidden text)", _hidden_tags),
)
"""Matched on the raw text: folding drops these characters."""
_FOLDED_REJECTIONS: tuple[Rule, ...] = (
    Rule(
        "ignore_instructions",
        "tells the model to ignore its instructions",
        lambda t: first(_IGNORE_PREVIOUS, t),
    ),
    Rule(
        "you_are_now",
        "tries to redefine the model's role ('you are now ...')",
        lambda t: first(_YOU_ARE_NOW, t),
    ),
    Rule("system_prefix", "has a line starting with 'system:'", lambda t: first(_LEADING_SYSTEM, t)),
    Rule(
        "role_prefix",
        "has a line starting with a chat role label ('assistant:')",
        lambda t: first(_LEADING_ROLE, t),
    ),
    Rule(
        "chat_template",
        "contains a chat-template token (<|im_start|>, [INST] ...)",
        lambda t: first(_CHAT_TEMPLATE, t),
    ),
    Rule(
        "curl_with_credentials",
        "contains a curl/wget/HTTPie command carrying credentials",
        _command_with_auth,
    ),
)
_REJECTIONS = _RAW_REJECTIONS + _FOLDED_REJECTIONS


def check_rejected(text: str, *, field: str = "content") -> None:
    """Raise `ScreeningRejected` (pattern + field) when `text` matches a rejected pattern."""
    folded = fold(text)
    checks = [(rule, text) for rule in _RAW_REJECTIONS] + [(rule, folded) for rule in _FOLDED_REJECTIONS]
    for rule, seen in checks:
        hit = rule.find(seen)
        if hit is not None:
            shown = hit.encode("unicode_escape").decode("ascii") if len(hit) == 1 else hit.strip()
            raise ScreeningRejected(
                f"{field} rejected by screening: it {rule.why} (pattern {rule.name}, matched {shown!r}); "
                "memory entries are replayed into prompts, so this cannot be stored",
                pattern=rule.name,
                field=field,
            )


@dataclass(frozen=True)
class Screening:
    """The outcome of screening text that was not rejected."""

    sensitive: tuple[str, ...]
    """Sensitive pattern names found: non-empty means the entry must be private."""

    @property
    def forces_private(self) -> bool:
        return bool(self.sensitive)

    def describe(self) -> str:
        return ", ".join(SENSITIVE_DESCRIPTIONS[name] for name in self.sensitive)


def screen(*texts: tuple[str, str]) -> Screening:
    """Screen (field, text) pairs: `ScreeningRejected` on the first rejected pattern, else the
    sensitive patterns found in any of them."""
    found: list[str] = []
    for field, text in texts:
        check_rejected(text, field=field)
    for _field, text in texts:
        found.extend(name for name in find_sensitive(text) if name not in found)
    return Screening(sensitive=tuple(found))
