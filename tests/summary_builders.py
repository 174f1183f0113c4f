"""Summaries of one test thread (`THREAD`), built by version, for the summary cache and store tests."""

from __future__ import annotations

from datetime import UTC, datetime

from core.journal.models import ThreadRef
from core.summaries.models import Summary

THREAD = ThreadRef(environment="test", account_id="acme", thread_id="t1")


def make(version: int, content: str = "", *, offset: int | None = None) -> Summary:
    """Version `version` of a summary: covers offsets up to `version * 10` (or `offset`), its
    timestamp grows with the version (seconds wrap at 60), 4 tokens of default content."""
    return Summary(
        version=version,
        timestamp=datetime(2026, 11, 29, 10, 0, version % 60, tzinfo=UTC),
        last_message_offset=offset if offset is not None else version * 10,
        last_message_id=f"m{version * 10}",
        content=content or f"summary version {version}",
        token_count=4,
        message_count=version * 10,
    )
