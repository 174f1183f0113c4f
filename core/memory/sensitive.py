"""Sensitive-content patterns of screening: credentials and personal data. Pure, no I/O.

`find_sensitive(text)` names the patterns found in the folded text (`core.memory.folding`):
API keys and access tokens (OpenAI/Anthropic `sk-`, Stripe `sk_live_`/`rk_test_`, memstream's own
`msk_` keys, GitHub, GitLab `glpat-`, Hugging Face `hf_`, npm `npm_`, SendGrid `SG.`, AWS, Slack,
Google), JSON Web Tokens, private key blocks, credential assignments and statements ("api_key =
...", "my password is ..."), bearer tokens, URLs carrying a secret (Slack webhooks,
`user:password@host`), payment card numbers (Luhn-checked; spaces, dashes or dots between
groups), IBANs (any case; country length and mod-97 checked), e-mail addresses, phone numbers
(international `+...`, North American, national numbers with a trunk 0 such as `030 12345678`,
and bare 10-11 digit numbers after a word such as "phone" or "call me") and US social security
numbers. Sensitive text is not rejected: it forces the entry `private`
(`core.memory.screening`). Each pattern has near misses that pass
(tests/core/memory/test_screening*.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from core.memory.folding import fold


@dataclass(frozen=True)
class Rule:
    """A named pattern: `find` returns the matching text, or None."""

    name: str
    why: str
    find: Callable[[str], str | None]


def first(pattern: re.Pattern[str], text: str) -> str | None:
    match = pattern.search(text)
    return None if match is None else match.group(0)


_API_KEYS = re.compile(
    r"\bsk-(?:proj-|live-|test-|ant-)?[A-Za-z0-9_-]{20,}"  # OpenAI / Anthropic
    r"|\b[sr]k_(?:live|test)_[A-Za-z0-9]{10,}"  # Stripe secret / restricted keys
    r"|\bmsk_[A-Za-z0-9_-]{20,}"  # memstream API keys
    r"|\bgh[pousr]_[A-Za-z0-9]{30,}|\bgithub_pat_[A-Za-z0-9_]{30,}"  # GitHub
    r"|\bglpat-[A-Za-z0-9_-]{20,}"  # GitLab personal access token
    r"|\bhf_[A-Za-z0-9]{30,}"  # Hugging Face
    r"|\bnpm_[A-Za-z0-9]{36}\b"  # npm
    r"|\bSG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}"  # SendGrid
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
_NOT_A_SECRET = (
    r"not|too|very|so|quite|really|required|needed|necessary|mandatory|optional|wrong|incorrect|correct"
    r"|right|invalid|valid|expired|expiring|missing|empty|blank|weak|strong|long|short|secure|insecure"
    r"|safe|unsafe|changed|reset|set|stored|saved|hashed|encrypted|protected|sent|case|the|still|being"
    r"|now|same|different|unknown|forgotten|lost|compromised|leaked|okay|fine|good|bad|hard|easy|shared"
    r"|private|visible|hidden|only|also|just|managed|generated|rotated|updated|enough|what|which|that"
    r"|this|your|our|their|his|her"
)
_PASSWORD_STATEMENT = re.compile(
    r"\b(?:password|passwd|passphrase|passcode|pwd)(?:\s+(?:for|of|to|on)(?:\s+\S+){1,3}?)?"
    r"\s+(?:is|was|will\s+be)\s*:?\s+['\"]?"
    rf"(?!(?:{_NOT_A_SECRET})\b)(?=[^\s'\"]*[A-Za-z0-9])[^\s'\"]{{3,}}",
    re.IGNORECASE,
)
_BEARER = re.compile(r"\bbearer\s+[A-Za-z0-9._~+/-]{16,}=*", re.IGNORECASE)
_SECRET_URL = re.compile(
    r"\bhooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/-]{20,}"  # Slack webhook
    r"|\b[a-z][a-z0-9+.-]*://[^/\s:@'\"]+:[^/\s@'\"]+@[^\s/'\"]",  # scheme://user:password@host
    re.IGNORECASE,
)
_EMAIL = re.compile(
    r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b"
)
_CARD_CANDIDATES = (
    re.compile(r"(?<![\d.-])\d(?:[ -]?\d){12,18}(?![\d.-]|-\d)"),  # 4111 1111 1111 1111, 4111-...
    re.compile(r"(?<![\d.])\d{4}(?:\.\d{4}){3}(?:\.\d{1,3})?(?!\.?\d)"),  # 4111.1111.1111.1111
    re.compile(r"(?<![\d.])\d{4}\.\d{6}\.\d{5}(?!\.?\d)"),  # 3782.822463.10005 (Amex)
)
_PHONE = re.compile(
    r"(?<![\w+])\+[1-9](?:[ .\-/]?\(?\d\)?){6,16}(?![\w-])"  # +14155552671, +49 (0)30 1234567
    r"|(?<![\w(-])\(?\d{3}\)?[ .-]\d{3}[ .-]\d{4}(?![\w-])"  # (415) 555-2671, 415-555-2671
    r"|(?<![\w-])0\d{1,4}[ ]\d{2,4}[ ]\d{2,4}(?:[ ]\d{2,4})?(?![\w-])"  # 020 7946 0958 (trunk 0)
    r"|(?<![\w-])0\d{2,4}[ /-]\d{5,8}(?![\w-])"  # 030 12345678, 0151/23456789
)
_PHONE_CUE = re.compile(
    r"\b(?:phone|tel|telephone|mobile|cell|cellphone|handy|fax|whatsapp|sms|call\s+me|text\s+me"
    r"|reach\s+me|my\s+number)\b[^\d\n]{0,20}?(?<!\d)(\d{10,11})(?!\d)",
    re.IGNORECASE,
)
_BARE_PHONE_DIGITS = re.compile(r"1?[2-9]\d{2}[2-9]\d{6}|0[1-9]\d{8,9}")
"""A bare number that can be dialled: North American (optionally with country code 1) or a
national number with a trunk 0."""
_SSN = re.compile(r"(?<![\w-])(?!000|666|9\d\d)\d{3}-(?!00)\d{2}-(?!0000)\d{4}(?![\w-])")
_IBAN = re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,4})?\b", re.IGNORECASE)
IBAN_LENGTHS: dict[str, int] = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22,
    "BI": 27, "BR": 29, "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DJ": 27,
    "DK": 18, "DO": 28, "EE": 20, "EG": 29, "ES": 24, "FI": 18, "FK": 18, "FO": 18, "FR": 27,
    "GB": 22, "GE": 22, "GI": 23, "GL": 18, "GR": 27, "GT": 28, "HR": 21, "HU": 28, "IE": 22,
    "IL": 23, "IQ": 23, "IS": 26, "IT": 27, "JO": 30, "KW": 30, "KZ": 20, "LB": 28, "LC": 32,
    "LI": 21, "LT": 20, "LU": 20, "LV": 21, "LY": 25, "MC": 27, "MD": 24, "ME": 22, "MK": 19,
    "MN": 20, "MR": 27, "MT": 31, "MU": 30, "NI": 28, "NL": 18, "NO": 15, "OM": 23, "PK": 24,
    "PL": 28, "PS": 29, "PT": 25, "QA": 29, "RO": 24, "RS": 22, "RU": 33, "SA": 24, "SC": 31,
    "SD": 18, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "SO": 23, "ST": 25, "SV": 28, "TL": 23,
    "TN": 24, "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20, "YE": 30,
}  # fmt: skip
"""IBAN length per country (ISO 13616 registry)."""


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
    """True when `candidate` (spaces allowed, any case) is a structurally valid IBAN (ISO 13616
    mod-97); the length is not checked here (`_iban` checks it per country)."""
    iban = candidate.replace(" ", "").upper()
    if not 15 <= len(iban) <= 34 or not iban.isalnum():
        return False
    rearranged = iban[4:] + iban[:4]
    number = "".join(str(int(c, 36)) for c in rearranged)
    return int(number) % 97 == 1


def _card_number(text: str) -> str | None:
    for pattern in _CARD_CANDIDATES:
        for match in pattern.finditer(text):
            digits = re.sub(r"[ .-]", "", match.group(0))
            if 13 <= len(digits) <= 19 and len(set(digits)) > 1 and luhn_ok(digits):
                return match.group(0)
    return None


def _iban(text: str) -> str | None:
    """The first valid IBAN: the country's length taken from the start of each candidate (the
    candidate may run into the next word), then mod-97."""
    for match in _IBAN.finditer(text):
        compact = match.group(0).replace(" ", "").upper()
        length = IBAN_LENGTHS.get(compact[:2])
        if length is not None and len(compact) >= length and iban_ok(compact[:length]):
            return match.group(0)
    return None


def _phone(text: str) -> str | None:
    for match in _PHONE.finditer(text):
        found = match.group(0)
        if not found.startswith("+") or 8 <= sum(c.isdigit() for c in found) <= 15:
            return found
    for match in _PHONE_CUE.finditer(text):
        if _BARE_PHONE_DIGITS.fullmatch(match.group(1)):
            return match.group(1)
    return None


SENSITIVE_RULES: tuple[Rule, ...] = (
    Rule("api_key", "an API key or access token", lambda t: first(_API_KEYS, t)),
    Rule("jwt", "a JSON Web Token", lambda t: first(_JWT, t)),
    Rule("private_key", "a private key block", lambda t: first(_PRIVATE_KEY, t)),
    Rule(
        "credential",
        "a credential (password/token/api_key = ..., 'my password is ...')",
        lambda t: first(_CREDENTIAL_ASSIGNMENT, t) or first(_PASSWORD_STATEMENT, t),
    ),
    Rule("bearer_token", "a bearer token", lambda t: first(_BEARER, t)),
    Rule("secret_url", "a URL carrying a secret (webhook, user:password@)", lambda t: first(_SECRET_URL, t)),
    Rule("card_number", "a payment card number", _card_number),
    Rule("iban", "a bank account number (IBAN)", _iban),
    Rule("email", "an e-mail address", lambda t: first(_EMAIL, t)),
    Rule("phone", "a phone number", _phone),
    Rule("ssn", "a US social security number", lambda t: first(_SSN, t)),
)

SENSITIVE_DESCRIPTIONS: dict[str, str] = {rule.name: rule.why for rule in SENSITIVE_RULES}
"""Pattern name -> what it detects (for notes and error messages)."""


def find_sensitive(text: str) -> list[str]:
    """Names of the sensitive patterns found in `text` (empty when none), in a fixed order."""
    folded = fold(text)
    return [rule.name for rule in SENSITIVE_RULES if rule.find(folded) is not None]
