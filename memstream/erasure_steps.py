"""The node's own steps of a user erasure (`core.user_erasure.ErasureStep`), after its threads and
memory:

- `query_vectors`: the vectors of the user's recent recall and transcript-search queries that
  this process keeps (`core.memory.query_vectors.QueryVectors`, keyed by the caller's scope: they
  hold the query texts). Another node's are not reached: they are in its memory only, and go as
  newer queries replace them (1,024 kept) or when it restarts.

Each is idempotent: run again, it finds nothing and reports zeros.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from core.memory.query_vectors import QueryVectors
from core.stores.erasures import ErasureRecord


def _of_user(record: ErasureRecord, scope: Hashable) -> bool:
    """Whether a cache scope (`MemoryScope`, `TranscriptScope`: environment, account, agent, user)
    is the erased user's."""
    return (
        getattr(scope, "environment", None),
        getattr(scope, "account_id", None),
        getattr(scope, "user_id", None),
    ) == (record.environment, record.account_id, record.user_id)


class QueryVectorsStep:
    name = "query_vectors"

    def __init__(self, caches: Sequence[QueryVectors]) -> None:
        self.caches = tuple(caches)

    async def run(self, record: ErasureRecord) -> Mapping[str, Any]:
        evicted = sum(cache.forget(lambda scope: _of_user(record, scope)) for cache in self.caches)
        return {"evicted": evicted}
