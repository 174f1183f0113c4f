"""The one validator of ids and names: one pattern per kind, always matched in full.

Every id or name that enters memstream (API paths, bodies and query strings, tool arguments, the
CLI and admin inputs, journal models) is checked here, so that what reaches a journal key, an
object-store path, a Redis key or a SQL identifier is exactly what the pattern allows. A pattern
is never used with `re.match` and a trailing `$` (which also matches before a final newline, so
`"t1\\n"` would pass): every check is `fullmatch` against the pattern's body.

Kinds:
- `ID`: thread, agent, user, message, tool-call and account ids, journal cursor names:
  1-128 of A-Z a-z 0-9 . _ : @ -, starting with a letter or digit.
- `ENVIRONMENT`: a deployment environment: 1-32 of a-z 0-9 _ -, starting with a letter or digit.
- API keys (`msk_...`, `is_api_key`) and the ids of issued keys (`key_` + 16 hex digits,
  `require_api_key_id`) have fixed shapes of their own.

`IdKind.pattern` is the anchored pattern for JSON Schema / OpenAPI (ECMA-262 regexes, where `$`
is the end of the string). `IdKind.check` raises ValueError (for pydantic validators);
`IdKind.require` raises `InvalidInput` naming the field. Both say which character is wrong.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, WithJsonSchema

from core.errors import InvalidInput


def describe_char(char: str) -> str:
    """`'\\n' (U+000A)`: a character as an error message shows it (escaped, with its code point)."""
    return f"{char!r} (U+{ord(char):04X})"


class IdKind:
    """One kind of id: its first and following characters (regex classes) and its length."""

    def __init__(self, first: str, rest: str, max_chars: int, rule: str) -> None:
        self.first = first
        self.rest = rest
        self.max_chars = max_chars
        self.rule = rule
        """What is allowed, in words ("must be ...")."""
        self._regex = re.compile(self.body)

    @property
    def body(self) -> str:
        """The pattern without anchors (use it only with `fullmatch`)."""
        return f"{self.first}{self.rest}{{0,{self.max_chars - 1}}}"

    @property
    def pattern(self) -> str:
        """The anchored pattern for JSON Schema / OpenAPI."""
        return f"^{self.body}$"

    def matches(self, value: object) -> bool:
        return isinstance(value, str) and self._regex.fullmatch(value) is not None

    def problem(self, value: object) -> str | None:
        """None when `value` is valid; else the rule and what exactly is wrong."""
        if self.matches(value):
            return None
        if not isinstance(value, str):
            return f"{self.rule} (got {type(value).__name__}, not a string)"
        if not value:
            return f"{self.rule} (it is empty)"
        if len(value) > self.max_chars:
            return f"{self.rule} (it is {len(value)} characters)"
        if not re.fullmatch(self.first, value[0]):
            return f"{self.rule} (it starts with {describe_char(value[0])})"
        for position, char in enumerate(value):
            if not re.fullmatch(self.rest, char):
                return f"{self.rule} (it contains {describe_char(char)} at position {position})"
        return self.rule  # pragma: no cover - every way of failing the pattern is described above

    def check(self, value: str) -> str:
        """`value` when valid; ValueError saying what is wrong otherwise."""
        problem = self.problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    def require(self, value: object, field: str) -> str:
        """`value` when valid; InvalidInput naming `field` and what is wrong otherwise."""
        problem = self.problem(value)
        if problem is not None:
            shown = repr(value[:140]) if isinstance(value, str) else type(value).__name__
            raise InvalidInput(f"{field} {shown} {problem}", field=field)
        assert isinstance(value, str)
        return value


ID = IdKind(
    first="[A-Za-z0-9]",
    rest="[A-Za-z0-9._:@-]",
    max_chars=128,
    rule="must be 1-128 characters of A-Z a-z 0-9 . _ : @ -, starting with a letter or digit",
)
ENVIRONMENT = IdKind(
    first="[a-z0-9]",
    rest="[a-z0-9_-]",
    max_chars=32,
    rule="must be 1-32 characters of a-z 0-9 _ -, starting with a letter or digit",
)
_API_KEY = re.compile(r"msk_[A-Za-z0-9_-]{20,200}")
API_KEY_IN_TEXT = re.compile(r"msk_[A-Za-z0-9_-]{20,}")
"""Finds an API key inside other text (a URL, a log line): to refuse or redact it."""
_API_KEY_ID = re.compile(r"key_[0-9a-f]{16}")

ID_PATTERN = ID.pattern
ENVIRONMENT_PATTERN = ENVIRONMENT.pattern


def check_id(value: str) -> str:
    """`value` when it is a valid `ID`; ValueError saying what is wrong otherwise."""
    return ID.check(value)


def require_id(value: object, field: str) -> str:
    """`value` when it is a valid `ID`; InvalidInput naming `field` otherwise."""
    return ID.require(value, field)


def shown_id(value: str) -> str:
    """An id as a report shows it: as it is when it is a valid `ID`, else quoted with its invalid
    characters escaped (`'t1\\n'`), so that it cannot break or fake a line of output."""
    return value if ID.matches(value) else repr(value)


def require_environment(value: object, field: str = "environment") -> str:
    """`value` when it is a valid `ENVIRONMENT`; InvalidInput naming `field` otherwise."""
    return ENVIRONMENT.require(value, field)


def is_api_key(value: object) -> bool:
    """Whether `value` has the shape of an API key (`msk_` + 20-200 of A-Z a-z 0-9 _ -)."""
    return isinstance(value, str) and _API_KEY.fullmatch(value) is not None


def require_api_key_id(value: object, field: str = "key_id") -> str:
    """`value` when it is the id of an API key (`key_` + 16 hex digits); InvalidInput otherwise."""
    if isinstance(value, str) and _API_KEY_ID.fullmatch(value):
        return value
    shown = repr(value[:140]) if isinstance(value, str) else type(value).__name__
    raise InvalidInput(
        f"{field} {shown} is not an API key id: key ids are 'key_' followed by 16 hex digits, as "
        "`memstream keys list` shows them",
        field=field,
    )


Id = Annotated[str, AfterValidator(check_id), WithJsonSchema({"type": "string", "pattern": ID_PATTERN})]
"""A pydantic field holding an `ID` (validated in full; its JSON Schema carries the pattern)."""


def check_stored_id(value: str) -> str:
    """`value` when it is an `ID`, or was accepted as one before ids were matched in full: an `ID`
    followed by one line feed (`re.match` with a trailing `$` let it through). Journal rows holding
    such ids stay readable (the relay, replays and rebuilds must get past them); no new one can be
    written, since every input is checked with `check_id`."""
    if ID.matches(value) or (value.endswith("\n") and ID.matches(value[:-1])):
        return value
    raise ValueError(ID.problem(value))


StoredId = Annotated[str, AfterValidator(check_stored_id)]
"""A pydantic field holding an id read back from storage (see `check_stored_id`)."""
