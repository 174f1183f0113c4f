"""Dead-letter records: bytes kept, the schema of topics.yaml."""

from __future__ import annotations

import base64
from datetime import UTC, datetime

from streams.codecs import dead_letter
from streams.codecs.errors import InvalidEvent
from streams.topics import load_topics

REGISTRY = load_topics().with_dead_letter("summarizer")


def test_dead_letter_payload_keeps_bytes_and_matches_the_schema() -> None:
    value = b"\xff\x00not utf-8"
    payload = dead_letter.payload(
        processor="summarizer",
        original_topic="t.journal.messages",
        partition=2,
        offset=99,
        key=b"th:1",
        value=value,
        headers=[("message_id", b"m-1"), ("empty", None)],
        reason="value is not JSON",
        error=InvalidEvent("journal.messages value is not JSON"),
        attempts=3,
        failed_at=datetime(2026, 11, 2, 10, 0, tzinfo=UTC),
    )
    REGISTRY.validate("dlq.summarizer", payload)
    assert base64.b64decode(payload["value_base64"]) == value
    assert payload["value_text"] is None
    assert payload["key_text"] == "th:1"
    assert payload["error_type"] == "streams.codecs.errors.InvalidEvent"
    assert payload["failed_at"] == "2026-11-02T10:00:00Z"
    assert payload["headers"][1] == {"key": "empty", "value_base64": None}


def test_dead_letter_payload_of_a_tombstone_with_an_error_name() -> None:
    payload = dead_letter.payload(
        processor="summarizer",
        original_topic="journal.messages",
        partition=0,
        offset=0,
        key=None,
        value=None,
        headers=None,
        reason="tombstone",
        error="Tombstone",
    )
    REGISTRY.validate("dlq.summarizer", payload)
    assert payload["key_base64"] is None and payload["value_text"] is None and payload["headers"] == []
    assert payload["failed_at"].endswith("Z")
