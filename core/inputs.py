"""Rules every piece of caller input obeys before it can reach a store, in one place.

- **Text** is valid Unicode without NUL: a lone surrogate (U+D800..U+DFFF on its own, e.g. JSON
  `"\\ud800"`) cannot be encoded as UTF-8, so no store can hold it; NUL (U+0000) cannot be held
  by Postgres `text`/`jsonb`. `check_text`.
- **JSON** is nested at most `MAX_JSON_DEPTH` levels (deeper input exhausts the recursion of
  every JSON parser and encoder on its way), its numbers are finite and have at most Python's
  integer-digit limit, and every string and key is valid text. `loads_json` parses JSON text a
  caller sent inside a field (tool-call arguments); `check_json_value` checks a decoded value;
  `decode_json_body` decodes a whole request body.
- **Integers** that address something (offsets, seqs, counts) are at most `MAX_INT64`, what
  Postgres `bigint` and ClickHouse `Int64` hold (the journal's keys hold up to 2^64 - 1).

Every violated rule raises an `InvalidInput` with its own code and the field at fault:
`InvalidText` (`invalid_text`), `JsonTooDeep` (`json_too_deep`), `NumberOutOfRange`
(`number_out_of_range`), `InvalidEncoding` (`invalid_encoding`: a body that is not UTF-8). The
HTTP API answers them 422; nothing is written.
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any

from core.errors import InvalidInput

MAX_JSON_DEPTH = 64
"""Deepest nesting of arrays/objects accepted in a request body or in JSON text inside a field."""
MAX_INT64 = (1 << 63) - 1


class InvalidText(InvalidInput):
    """Text with a NUL character or a lone surrogate; nothing was written."""

    code = "invalid_text"


class JsonTooDeep(InvalidInput):
    """JSON nested deeper than allowed; nothing was written."""

    code = "json_too_deep"


class NumberOutOfRange(InvalidInput):
    """A number that is not finite, has too many digits, or is too large for what it addresses."""

    code = "number_out_of_range"


class InvalidEncoding(InvalidInput):
    """A request body that is not UTF-8 (or UTF-16/32 JSON); nothing was written."""

    code = "invalid_encoding"


INPUT_ERROR_CODES = frozenset(
    kind.code for kind in (InvalidText, JsonTooDeep, NumberOutOfRange, InvalidEncoding)
)
"""The codes above: a pydantic validator raising `PydanticCustomError(code, ...)` with one of them
keeps it in the API's 422 answer."""


def text_problem(value: str) -> str | None:
    """Why `value` cannot be stored (NUL, lone surrogate), or None when it can."""
    if "\x00" in value:
        return "contains a NUL character (\\u0000), which cannot be stored"
    if value.isascii():
        return None
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        return (
            f"contains a lone surrogate (U+{ord(value[exc.start]):04X}) at position {exc.start}: text must "
            "be valid Unicode (a character outside the BMP is a high surrogate followed by a low one)"
        )
    return None


def check_text(value: str, field: str) -> str:
    """`value` when it can be stored; InvalidText naming `field` otherwise."""
    problem = text_problem(value)
    if problem is not None:
        raise InvalidText(f"{field} {problem}", field=field)
    return value


def _join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def check_json_value(value: object, field: str, *, max_depth: int = MAX_JSON_DEPTH) -> None:
    """Check a decoded JSON value (iteratively: any depth is safe to check): nesting at most
    `max_depth` (the value itself is level 1), valid text in every string and key, finite numbers,
    only JSON types. `field` is the value's path (`""` for a request body's root); errors name the
    path of the offending part (`metadata.a.b[1]`)."""
    stack: list[tuple[str, object, int]] = [(field, value, 1)]
    while stack:
        path, item, depth = stack.pop()
        shown = path or "the request body"
        if isinstance(item, dict | list) and depth > max_depth:
            raise JsonTooDeep(f"{shown} nests deeper than {max_depth} levels", field=path or None)
        if isinstance(item, dict):
            for key, child in item.items():
                if not isinstance(key, str):
                    raise InvalidInput(f"{shown} has a non-string key {key!r}", field=path or None)
                problem = text_problem(key)
                if problem is not None:
                    raise InvalidText(f"{shown} has a key that {problem}", field=path or None)
                stack.append((_join(path, key), child, depth + 1))
        elif isinstance(item, list):
            for index, child in enumerate(item):
                stack.append((_join(path, index), child, depth + 1))
        elif isinstance(item, str):
            problem = text_problem(item)
            if problem is not None:
                raise InvalidText(f"{shown} {problem}", field=path or None)
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise NumberOutOfRange(f"{shown} is {item}: JSON numbers must be finite", field=path or None)
        elif item is not None and not isinstance(item, bool | int):
            raise InvalidInput(f"{shown} is not a JSON value ({type(item).__name__})", field=path or None)


class _NotANumber(ValueError):
    """`NaN`/`Infinity` in JSON text (Python's parser accepts them; JSON does not)."""


def _reject_constant(name: str) -> Any:
    raise _NotANumber(name)


def _parse(text: str | bytes, field: str, max_depth: int) -> Any:
    """json.loads turning every way it can fail but bad syntax into the typed errors (module doc);
    `json.JSONDecodeError` propagates."""
    shown = field or "the request body"
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except _NotANumber as exc:
        raise NumberOutOfRange(
            f"{shown} contains {exc}, which is not a JSON number", field=field or None
        ) from None
    except json.JSONDecodeError:
        raise
    except RecursionError:
        raise JsonTooDeep(f"{shown} nests deeper than {max_depth} levels", field=field or None) from None
    except ValueError:  # an integer beyond the interpreter's digit limit
        raise NumberOutOfRange(
            f"{shown} contains a number with more than {sys.get_int_max_str_digits()} digits",
            field=field or None,
        ) from None


def loads_json(text: str, field: str, *, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """The value of JSON text sent in `field` (e.g. tool-call arguments), checked with
    `check_json_value`; InvalidInput naming `field` when it is not valid JSON (`not valid JSON`),
    and the typed errors of the module doc."""
    try:
        value = _parse(text, field, max_depth)
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"{field} is not valid JSON: {exc}", field=field) from None
    check_json_value(value, field, max_depth=max_depth)
    return value


def decode_json_body(body: bytes, *, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """A request body's JSON value, checked with `check_json_value` (errors name paths inside the
    body, `messages[0].content`). The encoding is detected as `json.loads` does (UTF-8, or
    UTF-16/32 with or without a BOM) and decoded strictly: InvalidEncoding when the bytes are not
    text in it. Bad JSON syntax raises `json.JSONDecodeError` (the caller reports it its way)."""
    encoding = json.detect_encoding(body)
    try:
        text = body.decode(encoding)
    except UnicodeDecodeError as exc:
        raise InvalidEncoding(
            f"the request body is not valid {encoding.upper().removesuffix('-SIG')}: {exc.reason} at byte "
            f"{exc.start} (0x{body[exc.start]:02x}); send JSON encoded as UTF-8",
        ) from None
    value = _parse(text, "", max_depth)
    check_json_value(value, "", max_depth=max_depth)
    return value
