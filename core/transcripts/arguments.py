"""Reading a tool call's arguments: a JSON object (or its JSON text, as models send it), checked
one argument at a time so that every problem raises `InvalidInput` naming the argument
(`field="arguments.limit"`) with a message that says what is allowed.

Types are strict: `true` is not an integer, `1` is not a boolean, `"5"` is not a number.
An optional argument sent as JSON `null` counts as absent (models often send every argument,
with null for the ones they do not use); a required one must have a value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, date, datetime, time
from typing import Any, TypeVar

from core.errors import InvalidInput
from core.ids import ID
from core.inputs import MAX_INT64, check_text, loads_json

T = TypeVar("T", bound=str)


def arguments_object(tool: str, arguments: str | Mapping[str, Any], allowed: Sequence[str]) -> dict[str, Any]:
    """`arguments` as a dict; InvalidInput when it is not a JSON object or names an argument
    `tool` does not have."""
    if isinstance(arguments, str):
        arguments = loads_json(arguments, "arguments") if arguments.strip() else {}
    if not isinstance(arguments, Mapping):
        raise InvalidInput(f"arguments of {tool} must be a JSON object", field="arguments")
    for name in arguments:
        if name not in allowed:
            raise InvalidInput(
                f"arguments.{name}: unknown argument for {tool} (allowed: {', '.join(allowed)})",
                field=f"arguments.{name}",
            )
    return dict(arguments)


def _field(name: str) -> str:
    return f"arguments.{name}"


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def required_string(tool: str, args: Mapping[str, Any], name: str, *, max_chars: int) -> str:
    """A string argument that must be present, not blank, and at most `max_chars` characters."""
    if name not in args:
        raise InvalidInput(f"{_field(name)}: required by {tool}", field=_field(name))
    value = args[name]
    if not isinstance(value, str):
        raise InvalidInput(f"{_field(name)}: must be a string, got {_kind(value)}", field=_field(name))
    if not value.strip():
        raise InvalidInput(f"{_field(name)}: must not be empty or blank", field=_field(name))
    if len(value) > max_chars:
        raise InvalidInput(
            f"{_field(name)}: is {len(value)} characters; at most {max_chars} are allowed", field=_field(name)
        )
    return check_text(value, _field(name))


def optional_id(args: Mapping[str, Any], name: str) -> str | None:
    """An id argument (1-128 of A-Z a-z 0-9 . _ : @ -), or None when absent or null."""
    value = args.get(name)
    if value is None:
        return None
    return id_value(name, value)


def id_value(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise InvalidInput(f"{_field(name)}: must be a string, got {_kind(value)}", field=_field(name))
    problem = ID.problem(value)
    if problem is not None:
        raise InvalidInput(f"{_field(name)}: {value[:140]!r} {problem}", field=_field(name))
    return value


def choice(args: Mapping[str, Any], name: str, options: Sequence[T], default: T) -> T:
    """One of `options` (default when absent or null)."""
    if args.get(name) is None:
        return default
    value = args[name]
    for option in options:
        if value == option:
            return option
    shown = repr(value) if isinstance(value, str) else _kind(value)
    allowed = ", ".join(repr(o) for o in options)
    raise InvalidInput(f"{_field(name)}: must be one of {allowed}, got {shown}", field=_field(name))


def integer(args: Mapping[str, Any], name: str, *, default: int, minimum: int, maximum: int | None) -> int:
    """An integer in [minimum, maximum] (default when absent or null; no `maximum`: at most
    MAX_INT64). Out of range is an error, never capped silently."""
    value = optional_integer(args, name, minimum=minimum, maximum=maximum)
    return default if value is None else value


def optional_integer(args: Mapping[str, Any], name: str, *, minimum: int, maximum: int | None) -> int | None:
    """An integer in [minimum, maximum] (no `maximum`: at most MAX_INT64), or None when absent or
    null."""
    value = args.get(name)
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # JSON has one number type: 10.0 is 10
    if isinstance(value, bool) or not isinstance(value, int):
        shown = str(value) if isinstance(value, float) else _kind(value)
        raise InvalidInput(f"{_field(name)}: must be an integer, got {shown}", field=_field(name))
    if maximum is None and minimum <= value:
        maximum = MAX_INT64  # what any integer store (Postgres bigint, ClickHouse Int64) can hold
    bounds = f"{minimum}..{maximum}" if maximum is not None else f">= {minimum}"
    if value < minimum or (maximum is not None and value > maximum):
        raise InvalidInput(f"{_field(name)}: must be {bounds}, got {value}", field=_field(name))
    return value


def boolean(args: Mapping[str, Any], name: str, *, default: bool) -> bool:
    """`true` or `false` (default when absent or null); no other value counts as a boolean."""
    if args.get(name) is None:
        return default
    value = args[name]
    if not isinstance(value, bool):
        shown = repr(value) if isinstance(value, str) else _kind(value)
        raise InvalidInput(f"{_field(name)}: must be true or false, got {shown}", field=_field(name))
    return value


def optional_time(args: Mapping[str, Any], name: str) -> datetime | None:
    """A point in time, or None when absent or null: an ISO 8601 date (`2024-05-01`: its start,
    UTC) or date and time (`2024-05-01T10:00:00Z`, `...+02:00`; without an offset: UTC), as a
    timezone-aware UTC datetime."""
    value = args.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidInput(f"{_field(name)}: must be a string, got {_kind(value)}", field=_field(name))
    text = value.strip()
    try:
        if len(text) == 10:
            moment = datetime.combine(date.fromisoformat(text), time(), tzinfo=UTC)
        else:
            moment = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidInput(
            f"{_field(name)}: must be an ISO 8601 date or date and time, e.g. 2024-05-01 or "
            f"2024-05-01T10:00:00Z; got {value[:40]!r}",
            field=_field(name),
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)
