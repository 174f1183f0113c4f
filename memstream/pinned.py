"""Pinned facts: the seam through which agent memory reaches every turn's context.

The context reader asks a `PinnedFactsProvider` for the facts pinned in a `MemoryScope`
(environment, account, agent, and the thread's user when it has one) and renders them as the first
system message. Agent memory arrives in a later issue and will implement the protocol; until then
`NoPinnedFacts` answers with none, and the context starts with the summary.

Contract for implementations: return only facts visible in the scope (private facts of another
user must never appear), in the order they should be shown; raise a `MemstreamError` on failure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from pydantic import BaseModel, ConfigDict

PINNED_HEADER = "Pinned facts (always true for this conversation):"


class MemoryScope(BaseModel):
    """Whose memory to read: the thread's environment, account, agent and (optional) user."""

    model_config = ConfigDict(frozen=True)

    environment: str
    account_id: str
    agent_id: str
    user_id: str | None


class PinnedFact(BaseModel):
    model_config = ConfigDict(frozen=True)

    fact_id: str
    content: str


class PinnedFactsProvider(Protocol):
    async def pinned(self, scope: MemoryScope) -> list[PinnedFact]:
        """The facts pinned for this scope, in display order (empty when none)."""
        ...


class NoPinnedFacts:
    """The provider used until agent memory exists: no facts."""

    async def pinned(self, scope: MemoryScope) -> list[PinnedFact]:
        return []


def render_pinned(facts: Sequence[PinnedFact]) -> str:
    """The text of the pinned-facts system message."""
    return "\n".join([PINNED_HEADER, *(f"- {fact.content}" for fact in facts)])
