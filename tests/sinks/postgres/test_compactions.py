"""thread_compactions on the real embedded Postgres: what only Postgres does (the summary version
high-water mark on the same row as the compaction). The ledger's contract is in
`tests/core/stores/test_compactions.py`."""

from __future__ import annotations

import asyncpg

from core.journal.models import ThreadRef
from sinks.postgres.compactions import PostgresCompactions, PostgresSummaryVersions
from tests.core.stores.test_compactions import A, request, row


async def test_the_summary_version_mark_leaves_the_compaction_alone(pool: asyncpg.Pool) -> None:
    """The mark lives next to the thread's compaction state and leaves it alone (that it only rises
    is in the contract suite, tests/core/stores/test_summaries.py)."""
    versions = PostgresSummaryVersions(pool)
    thread = ThreadRef(environment="test", account_id="acme", thread_id="th-1")
    ledger = PostgresCompactions(pool)
    await ledger.record_requests([(A, request(A, 49))])
    await versions.record(thread, "bot", 4)
    assert (await row(ledger, A)).to_offset == 49
    assert await versions.highest(thread, "bot") == 4
