"""Headers as the Kafka clients give them."""

from __future__ import annotations

from streams.codecs.records import header


def test_header_lookup() -> None:
    headers = [("a", b"1"), ("message_id", b"m"), ("a", b"2")]
    assert header(headers, "a") == b"1"
    assert header(headers, "message_id") == b"m"
    assert header(headers, "missing") is None
    assert header(None, "a") is None
