"""Thread summaries through an in-process cache (`CachedSummaries`, a `SummaryReader`).

Every turn's context shows the thread's rolling summary, read from the Redis cache (else the object
store) on each call: one round trip per context, two for a thread that has no summary yet.
`CachedSummaries` keeps what its reader answered, a summary or "none yet", in an `InvalidatedCache`
(`core.invalidated_cache`) keyed by the full scope (environment, account_id, agent_id, thread_id).

Freshness: the summarizer (in any process) raises the thread's durable version mark
(`core.summaries.layered.MonotonicSummaryStore` -> `thread_compactions.summary_version`) after each
new summary is durable, and Postgres NOTIFYs that change (migration 0011): `invalidated(payload)`
evicts the thread in the payload (a JSON array `[environment, account_id, agent_id, thread_id]`;
anything else empties the cache), `set_live` follows the feed, and while it is down every read goes
to the reader. A summary written without its mark being raised (a writer that died in between)
shows after `ttl_s` at the latest. A context is built from the summary and the messages after it,
so a summary shown late only means the context has the older summary a little longer, as when the
summarizer lags.
"""

from __future__ import annotations

from core.invalidated_cache import InvalidatedCache
from core.journal.models import ThreadRef
from core.summaries.models import Summary, SummaryReader

DEFAULT_TTL_S = 5.0

Key = tuple[str, str, str, str]


class CachedSummaries:
    """See the module doc. `reader` is what the node reads summaries from (Redis, object store)."""

    def __init__(
        self,
        reader: SummaryReader,
        *,
        ttl_s: float = DEFAULT_TTL_S,
        cache: InvalidatedCache[Key, Summary | None] | None = None,
    ) -> None:
        self.reader = reader
        self.ttl_s = ttl_s
        self.cache: InvalidatedCache[Key, Summary | None] = cache if cache is not None else InvalidatedCache()

    # ---- the change feed ---------------------------------------------------------------------------

    def set_live(self, live: bool) -> None:
        self.cache.set_live(live)

    def invalidated(self, payload: str) -> None:
        """A thread's summary version mark changed: `payload` is the thread's scope as a JSON array."""
        self.cache.notice(payload, 4, what="summary")

    # ---- SummaryReader ------------------------------------------------------------------------------

    async def read(self, thread: ThreadRef, agent_id: str) -> Summary | None:
        key = (thread.environment, thread.account_id, agent_id, thread.thread_id)
        return await self.cache.through(key, lambda: self.reader.read(thread, agent_id), ttl_s=self.ttl_s)
