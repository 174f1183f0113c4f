"""What a codec's `decode` raises for a record that is not an event of its topic. A processor
turns it into `InvalidMessage` (`streams.runtime.processor.decoded`), which dead-letters the record;
the DLQ record's `error_type` is then `streams.codecs.errors.InvalidEvent` (or its subclass)."""

from __future__ import annotations

from pydantic import ValidationError

from core.errors import MemstreamError


class InvalidEvent(MemstreamError):
    """A record on a topic is not a valid event of that topic (bad JSON, wrong fields); the message
    is the reason."""

    code = "invalid_event"


class UnsupportedSchemaVersion(InvalidEvent):
    """A record carries a `schema_version` this code does not read."""

    code = "unsupported_schema_version"


def first_error(exc: ValidationError) -> str:
    """The first error of `exc`: where it is, what is wrong, and how many errors there are."""
    errors = exc.errors()
    if not errors:
        return str(exc)
    first = errors[0]
    where = ".".join(str(p) for p in first.get("loc", ())) or "value"
    return f"{where}: {first.get('msg', 'invalid')} ({len(errors)} error(s))"
