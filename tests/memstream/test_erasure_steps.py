"""`memstream.erasure_steps`: the node's own steps of a user erasure. `query_vectors` drops the
erased user's cached query vectors (recall's `MemoryScope`s and transcript search's
`TranscriptScope`s) of this process, and no one else's."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import pytest

from core.memory.models import MemoryScope
from core.memory.query_vectors import QueryVectors
from core.stores.erasures import ErasureRecord
from core.stores.transcripts import TranscriptScope
from memstream.erasure_steps import QueryVectorsStep

pytestmark = pytest.mark.unit


class Embedder:
    model_id = "fixed"
    dimensions = 2

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [[1.0, 0.0] for _ in texts]


async def test_query_vectors_drops_the_users_queries_only() -> None:
    recall, search = QueryVectors(Embedder()), QueryVectors(Embedder())
    for account, user in (("acme", "ada"), ("acme", "bob"), ("globex", "ada")):
        await recall.vector(
            MemoryScope(environment="dev", account_id=account, agent_id="bot", user_id=user), "q"
        )
        await search.vector(TranscriptScope("dev", account, "bot", user), "q")
    await search.vector(TranscriptScope("prod", "acme", "bot", "ada"), "q")
    record = ErasureRecord(1, "dev", "acme", "ada", datetime.now(UTC))
    step = QueryVectorsStep([recall, search])
    assert await step.run(record) == {"evicted": 2}
    assert await step.run(record) == {"evicted": 0}
    assert (recall.misses, search.misses) == (3, 4)
    await recall.vector(MemoryScope(environment="dev", account_id="acme", agent_id="bot", user_id="bob"), "q")
    await recall.vector(MemoryScope(environment="dev", account_id="acme", agent_id="bot", user_id="ada"), "q")
    assert (recall.hits, recall.misses) == (1, 4)  # bob's kept, ada's embedded again
