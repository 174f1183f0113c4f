"""The shared input rules (`core.inputs`): text, JSON text and values, request bodies."""

from __future__ import annotations

import json
from typing import Any

import pytest

from core.errors import InvalidInput
from core.inputs import (
    MAX_JSON_DEPTH,
    InvalidEncoding,
    InvalidText,
    JsonTooDeep,
    NumberOutOfRange,
    check_json_value,
    check_text,
    decode_json_body,
    loads_json,
    text_problem,
)


def nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("text", ["", "plain", "Zürich € 😀", "line\nbreak\ttab", "\ufeffbom"])
def test_storable_text(text: str) -> None:
    assert text_problem(text) is None
    assert check_text(text, "content") == text


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("a\x00b", "NUL character"),
        ("\x00", "NUL character"),
        ("a\ud800", "lone surrogate (U+D800) at position 1"),
        ("\udc00z", "lone surrogate (U+DC00) at position 0"),
        ("😀\udfff", "lone surrogate (U+DFFF) at position 1"),
    ],
)
def test_unstorable_text(text: str, reason: str) -> None:
    with pytest.raises(InvalidText) as info:
        check_text(text, "content")
    assert (info.value.code, info.value.field) == ("invalid_text", "content")
    assert reason in info.value.message


def test_json_values_name_the_offending_path() -> None:
    check_json_value({"a": [1, 2.5, "x", None, True, {"b": "ok"}]}, "metadata")
    cases: list[tuple[object, type[InvalidInput], str | None]] = [
        ({"a": {"b": ["ok", "x\x00"]}}, InvalidText, "metadata.a.b[1]"),
        ({"k\ud800": 1}, InvalidText, "metadata"),
        ({"n": float("nan")}, NumberOutOfRange, "metadata.n"),
        ({"n": float("inf")}, NumberOutOfRange, "metadata.n"),
        ({"d": nested(MAX_JSON_DEPTH)}, JsonTooDeep, "metadata.d" + "[0]" * (MAX_JSON_DEPTH - 1)),
        ({"s": {1, 2}}, InvalidInput, "metadata.s"),
    ]
    for value, kind, field in cases:
        with pytest.raises(kind) as info:
            check_json_value(value, "metadata")
        assert info.value.field == field, value


def test_depth_limit_is_exact() -> None:
    check_json_value(nested(MAX_JSON_DEPTH), "x")
    with pytest.raises(JsonTooDeep, match=f"deeper than {MAX_JSON_DEPTH} levels"):
        check_json_value(nested(MAX_JSON_DEPTH + 1), "x")
    check_json_value(nested(3), "x", max_depth=3)
    with pytest.raises(JsonTooDeep):
        check_json_value(nested(4), "x", max_depth=3)


@pytest.mark.parametrize(
    ("text", "kind", "reason"),
    [
        ("[" * 10_000 + "]" * 10_000, JsonTooDeep, "nests deeper"),  # past the parser's recursion limit
        ("[" * 100 + "]" * 100, JsonTooDeep, "nests deeper"),  # parses, but deeper than the limit
        ('{"a": "\\u0000"}', InvalidText, "NUL character"),
        ('{"a": "\\ud800"}', InvalidText, "lone surrogate"),
        ('{"a": NaN}', NumberOutOfRange, "NaN"),
        ('{"a": -Infinity}', NumberOutOfRange, "-Infinity"),
        ('{"a": 1e999}', NumberOutOfRange, "finite"),
        ('{"a": 1' + "0" * 5000 + "}", NumberOutOfRange, "digits"),
        ("{not json", InvalidInput, "not valid JSON"),
    ],
)
def test_loads_json_refuses_what_no_store_can_hold(text: str, kind: type[InvalidInput], reason: str) -> None:
    with pytest.raises(kind, match=reason) as info:
        loads_json(text, "tool_call.arguments")
    assert info.value.field is not None and info.value.field.startswith("tool_call.arguments")


def test_loads_json_keeps_valid_pairs_and_values() -> None:
    assert loads_json('{"e": "\\ud83d\\ude00", "n": 10000000000000000000000}', "x") == {
        "e": "😀",
        "n": 10**22,
    }


def test_request_bodies() -> None:
    assert decode_json_body(b'{"a": [1, "\xc3\xbc"]}') == {"a": [1, "ü"]}
    assert decode_json_body('{"a": "ü"}'.encode("utf-16")) == {"a": "ü"}  # as json.loads detects it
    assert decode_json_body(b'\xef\xbb\xbf{"a": 1}') == {"a": 1}  # UTF-8 with a BOM
    with pytest.raises(InvalidEncoding, match="not valid UTF-8: invalid start byte at byte 7") as info:
        decode_json_body(b'{"a": "\xff"}')
    assert info.value.code == "invalid_encoding"
    with pytest.raises(InvalidEncoding):
        decode_json_body(b'{"a": "\xed\xa0\x80"}')  # a surrogate encoded in UTF-8 bytes
    with pytest.raises(InvalidText) as text:
        decode_json_body(json.dumps({"messages": [{"content": "a\x00"}]}).encode())
    assert text.value.field == "messages[0].content"
    with pytest.raises(json.JSONDecodeError):
        decode_json_body(b"{not json")
