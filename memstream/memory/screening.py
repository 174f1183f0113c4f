"""Write-time screening of memory entries: pure functions, no I/O.

Two outcomes for text about to be stored (content, and the key):
- **rejected** (`ScreeningRejected`, naming the pattern): prompt-injection shapes that must never be
  replayed into a prompt - "ignore previous instructions" and its variants ("disregard all prior
  rules", "forget your instructions", "ignore everything above"...), "you are now ...", a line
  starting with `system:` (after any line break, carriage return and U+2028 included), zero-width
  characters, bidirectional override characters, and curl/wget invocations carrying credentials
  (auth headers, `-u user:pass`, `--oauth2-bearer`...);
- **sensitive** (`find_sensitive` returns the pattern names): credentials and personal data (API
  keys and tokens, password assignments, private keys, card numbers (Luhn-checked), IBANs
  (mod-97-checked), e-mail addresses, phone numbers). Sensitive text is not rejected: the caller
  stores it `private`; only when there is no user to make it private is it refused
  (`SensitiveWithoutUser`).

Matching runs on the NFKC-normalised text, case-insensitively where it makes sense, so fullwidth
or compatibility look-alikes do not slip through. The checks are deliberately narrow: each has a
near-miss that passes (tests/memstream/memory/test_screening.py).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass

from memstream.errors import InvalidInput


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
"""Every character that starts a new line somewhere (str.splitlines' set): `system:` after any of
them is at a line start for whoever renders the text."""
_LEADING_SYSTEM = re.compile(rf"(?:^|(?<=[{_LINE_BREAKS}]))[ \t]*system[ \t]*:", re.IGNORECASE)
_ZERO_WIDTH = re.compile("[\u200b\u200c\u200d\u2060\ufeff]")
_BIDI = re.compile("[\u202a-\u202e\u2066-\u2069]")

_COMMAND = re.compile(r"\b(?:curl|wget)\b[^\n;|&]*(?:\\\n[^\n;|&]*)*", re.IGNORECASE)
_AUTH_HEADER_NAMES = r"(?:proxy-)?authorization|x-api-key|api-key|x-auth-token|cookie|private-token"
_COMMAND_AUTH = re.compile(
    rf"(?:-H|--header)(?:\s+|=)?['\"]?\s*(?:{_AUTH_HEADER_NAMES})\s*:"  # -H "Authorization: ..."
    r"|(?:^|\s)(?:-u|--user|--proxy-user)(?:\s+|=)['\"]?[^\s'\":]*:"  # -u user:pass
    r"|--oauth2-bearer\b|--(?:http-|ftp-|proxy-)?password\b|--aws-sigv4\b",
    re.IGNORECASE,
)


def _first(pattern: re.Pattern[str], text: str) -> str | None:
    match = pattern.search(text)
    return None if match is None else match.group(0)


def _curl_with_auth(text: str) -> str | None:
    for command in _COMMAND.finditer(text):
        if _COMMAND_AUTH.search(command.group(0)):
            return command.group(0)[:40]
    return None


@dataclass(frozen=True)
class _Rule:
    name: str
    why: str
    find: Callable[[str], str | None]


_REJECTIONS: tuple[_Rule, ...] = (
    _Rule("zero_width", "contains a zero-width character", lambda t: _first(_ZERO_WIDTH, t)),
    _Rule("bidi_override", "contains a bidirectional override character", lambda t: _first(_BIDI, t)),
    _Rule(
        "ignore_instructions",
        "tells the model to ignore its instructions",
        lambda t: _first(_IGNORE_PREVIOUS, t),
    ),
    _Rule(
        "you_are_now",
        "tries to redefine the model's role ('you are now ...')",
        lambda t: _first(_YOU_ARE_NOW, t),
    ),
    _Rule("system_prefix", "has a line starting with 'system:'", lambda t: _first(_LEADING_SYSTEM, t)),
    _Rule("curl_with_credentials", "contains a curl/wget command carrying credentials", _curl_with_auth),
)


def normalise(text: str) -> str:
    """NFKC form of `text` (compatibility look-alikes folded); what the patterns are matched on."""
    return unicodedata.normalize("NFKC", text)


def check_rejected(text: str, *, field: str = "content") -> None:
    """Raise `ScreeningRejected` (pattern + field) when `text` matches a rejected pattern."""
    # Invisible characters are checked on the raw text: NFKC keeps them, but be explicit.
    folded = normalise(text)
    for rule in _REJECTIONS:
        hit = rule.find(text if rule.name in ("zero_width", "bidi_override") else folded)
        if hit is not None:
            shown = hit.encode("unicode_escape").decode("ascii") if len(hit) == 1 else hit.strip()
            raise ScreeningRejected(
                f"{field} rejected by screening: it {rule.why} (pattern {rule.name}, matched {shown!r}); "
                "memory entries are replayed into prompts, so this cannot be stored",
                pattern=rule.name,
                field=field,
            )


# ---- sensitive patterns ---------------------------------------------------------------------------

_API_KEYS = re.compile(
    r"\bsk-(?:proj-|live-|test-|ant-)?[A-Za-z0-9_-]{20,}"  # OpenAI / Anthropic / Stripe style
    r"|\bgh[pousr]_[A-Za-z0-9]{30,}|\bgithub_pat_[A-Za-z0-9_]{30,}"  # GitHub
    r"|\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"  # AWS access key id
    r"|\bxox[abposr]-[A-Za-z0-9-]{10,}"  # Slack
    r"|\bAIza[0-9A-Za-z_-]{35}\b"  # Google API key
)
_JWT = re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")
_PRIVATE_KEY = re.compile(r"-----BEGIN (?:[A-Z]+ )*PRIVATE KEY-----")
_CREDENTIAL_ASSIGNMENT = re.compile(
    r"\b(?:api[_ -]?key|apikey|api[_ -]?secret|client[_ -]?secret|secret[_ -]?key|access[_ -]?token"
    r"|auth[_ -]?token|bearer[_ -]?token|refresh[_ -]?token|token|password|passwd|passphrase|pwd)"
    r"\s*[:=]\s*['\"]?[^\s'\"]{3,}",
    re.IGNORECASE,
)
_BEARER = re.compile(r"\bbearer\s+[A-Za-z0-9._~+/-]{16,}=*", re.IGNORECASE)
_EMAIL = re.compile(
    r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b"
)
_CARD_CANDIDATE = re.compile(r"(?<![\d.-])\d(?:[ -]?\d){12,18}(?![\d.-]|-\d)")
_PHONE = re.compile(
    r"(?<![\w+])\+[1-9]\d{7,14}\b"  # E.164: +14155552671
    r"|(?<![\w+])\+[1-9]\d{0,2}(?:[ .-]\(?\d{1,4}\)?){2,5}(?![\w-])"  # +44 20 7946 0958
    r"|(?<![\w(-])\(?\d{3}\)?[ .-]\d{3}[ .-]\d{4}(?![\w-])"  # (415) 555-2671, 415-555-2671
    r"|(?<![\w-])0\d{1,4}[ ]\d{2,4}[ ]\d{2,4}(?:[ ]\d{2,4})?(?![\w-])"  # 020 7946 0958 (trunk 0)
)
_IBAN = re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,4})?\b")


def luhn_ok(digits: str) -> bool:
    """True when the digit string passes the Luhn checksum."""
    total = 0
    for i, char in enumerate(reversed(digits)):
        d = int(char)
        if i % 2 == 1:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def iban_ok(candidate: str) -> bool:
    """True when `candidate` (spaces allowed) is a structurally valid IBAN (ISO 13616 mod-97)."""
    iban = candidate.replace(" ", "")
    if not 15 <= len(iban) <= 34:
        return False
    rearranged = iban[4:] + iban[:4]
    number = "".join(str(int(c, 36)) for c in rearranged)
    return int(number) % 97 == 1


def _card_number(text: str) -> str | None:
    for match in _CARD_CANDIDATE.finditer(text):
        digits = re.sub(r"[ -]", "", match.group(0))
        if 13 <= len(digits) <= 19 and len(set(digits)) > 1 and luhn_ok(digits):
            return match.group(0)
    return None


def _iban(text: str) -> str | None:
    for match in _IBAN.finditer(text):
        if iban_ok(match.group(0)):
            return match.group(0)
    return None


_SENSITIVE: tuple[_Rule, ...] = (
    _Rule("api_key", "an API key or access token", lambda t: _first(_API_KEYS, t)),
    _Rule("jwt", "a JSON Web Token", lambda t: _first(_JWT, t)),
    _Rule("private_key", "a private key block", lambda t: _first(_PRIVATE_KEY, t)),
    _Rule(
        "credential",
        "a credential assignment (password/token/api_key = ...)",
        lambda t: _first(_CREDENTIAL_ASSIGNMENT, t),
    ),
    _Rule("bearer_token", "a bearer token", lambda t: _first(_BEARER, t)),
    _Rule("card_number", "a payment card number", _card_number),
    _Rule("iban", "a bank account number (IBAN)", _iban),
    _Rule("email", "an e-mail address", lambda t: _first(_EMAIL, t)),
    _Rule("phone", "a phone number", lambda t: _first(_PHONE, t)),
)

SENSITIVE_DESCRIPTIONS: dict[str, str] = {rule.name: rule.why for rule in _SENSITIVE}
"""Pattern name -> what it detects (for notes and error messages)."""


def find_sensitive(text: str) -> list[str]:
    """Names of the sensitive patterns found in `text` (empty when none), in a fixed order."""
    folded = normalise(text)
    return [rule.name for rule in _SENSITIVE if rule.find(folded) is not None]


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
