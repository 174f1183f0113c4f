"""The `compaction.flushed` codec: the examples of topics.yaml, round trips, the flush's echo,
and a decode no stricter than the summarizer always was."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given

from streams.codecs.compaction_flushed import CompactionFlushed, FlushOutcome, decode, encode
from streams.codecs.compaction_requested import CompactionRequest
from streams.codecs.errors import InvalidEvent
from streams.topics import default_registry
from tests.streams.codecs.strategies import requests

TOPIC = "compaction.flushed"
EXAMPLES = default_registry().get(TOPIC).examples


@pytest.mark.parametrize("example", EXAMPLES)
def test_every_example_decodes_and_encodes_back(example: dict[str, Any]) -> None:
    flushed = decode(json.dumps(example).encode())
    assert flushed.payload() == example
    assert decode(encode(flushed).value) == flushed


@given(requests())
def test_the_flushed_record_echoes_the_request_and_round_trips(value: dict[str, Any]) -> None:
    request = CompactionRequest.model_validate(value)
    flushed = CompactionFlushed.of(request, FlushOutcome(status="stored", facts_stored=2))
    out = json.loads(encode(flushed).value)
    assert out == {**value, "flush": {"status": "stored", "facts_stored": 2, "facts_rejected": 0}}
    assert decode(encode(flushed).value) == flushed
    known = {k: v for k, v in out.items() if not k.startswith("x_")}
    default_registry().validate(TOPIC, known)


def test_only_the_scope_and_the_offsets_are_required() -> None:
    sparse = {
        "environment": "dev",
        "account_id": "acme",
        "agent_id": "bot",
        "thread_id": "th-1",
        "from_offset": 0,
        "to_offset": 3,
        "tokens": "not checked",
    }
    flushed = decode(json.dumps(sparse))
    assert flushed.scope.thread_id == "th-1" and flushed.to_offset == 3
    assert flushed.payload() == sparse


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (None, "value is missing"),
        (b"{not json", "value is invalid"),
        (b"[]", "value is invalid"),
        (json.dumps({**EXAMPLES[0], "account_id": "no/slashes"}).encode(), "account_id"),
        (json.dumps({**EXAMPLES[0], "agent_id": "../other"}).encode(), "agent_id"),
        (json.dumps({**EXAMPLES[0], "environment": ""}).encode(), "environment"),
        (json.dumps({**EXAMPLES[0], "to_offset": -1}).encode(), "to_offset"),
        (json.dumps({**EXAMPLES[0], "from_offset": 50}).encode(), "from_offset 50 is after to_offset 49"),
    ],
)
def test_what_the_summarizer_cannot_use_is_invalid(value: bytes | None, reason: str) -> None:
    with pytest.raises(InvalidEvent, match=reason):
        decode(value)


def test_the_flush_object_omits_an_absent_error() -> None:
    assert FlushOutcome(status="skipped_no_memory").payload() == {
        "status": "skipped_no_memory",
        "facts_stored": 0,
        "facts_rejected": 0,
    }
    assert FlushOutcome(status="failed", error="boom").payload()["error"] == "boom"
