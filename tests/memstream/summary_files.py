"""Write `summary.json` objects into a local object store root, where the context reader reads them."""

from __future__ import annotations

import json
from pathlib import Path

from core.journal.tokens import count_tokens
from core.summaries.models import summary_key


def write_summary(
    root: Path,
    account: str,
    agent: str,
    thread: str,
    content: str,
    *,
    version: int = 2,
    last_message_offset: int = 9,
    last_message_id: str = "m9",
    message_count: int = 10,
    environment: str = "test",
) -> None:
    """A valid summary of `thread` (its `token_count` is the real count of `content`)."""
    path = root / summary_key(environment, account, agent, thread)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {
                "version": version,
                "timestamp": "2026-11-29T10:00:00Z",
                "last_message_offset": last_message_offset,
                "last_message_id": last_message_id,
                "content": content,
                "token_count": count_tokens(content),
                "message_count": message_count,
            }
        )
    )
