"""Who calls a journal tool: the transcript scope and, when known, the thread the call came from."""

from __future__ import annotations

from dataclasses import dataclass

from core.stores.transcripts import TranscriptScope


@dataclass(frozen=True)
class JournalContext:
    """`scope`: the caller's environment, account and agent, and the user the call acts for
    (None: no user, so only the agent's threads that have no user). `thread_id`: the thread the
    call came from (it belongs to the agent and to exactly that user, or has no user when the
    scope has none: the caller checks)."""

    scope: TranscriptScope
    thread_id: str | None = None
