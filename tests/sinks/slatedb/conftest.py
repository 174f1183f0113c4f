"""Fixtures for the journal tests: a real SlateDB journal in a temporary directory."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sinks.slatedb.journal import SlateJournal


@pytest.fixture
def journal_url(tmp_path: Path) -> str:
    return f"file://{tmp_path / 'journal'}"


@pytest.fixture
async def journal(journal_url: str) -> AsyncIterator[SlateJournal]:
    opened = await SlateJournal.open(journal_url)
    yield opened
    await opened.close()
