"""What the API needs, built by the node and injected into `create_app`.

The app opens and closes nothing: the owner of `ApiDeps` opens the pool (and runs the
migrations) and the journal before serving, and closes them after the server stopped.
"""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from memstream.config import Settings
from memstream.context import ContextReader
from memstream.journal.base import Journal
from memstream.pinned import NoPinnedFacts, PinnedFactsProvider
from memstream.summaries import SummaryReader
from memstream.threads import ThreadService
from sinks.objectstore.summaries import ObjectStoreSummaryReader
from sinks.postgres.threads import PostgresThreadStore


@dataclass
class ApiDeps:
    """`settings.environment` scopes every request; `pool` serves API keys and threads."""

    settings: Settings
    journal: Journal
    pool: asyncpg.Pool
    threads: ThreadService
    context_reader: ContextReader
    readiness_timeout_s: float = 2.0


def build_api_deps(
    settings: Settings,
    journal: Journal,
    pool: asyncpg.Pool,
    *,
    summaries: SummaryReader | None = None,
    pinned: PinnedFactsProvider | None = None,
) -> ApiDeps:
    """The standard wiring: Postgres threads, summaries from `settings.object_store`, no pinned facts yet.

    Does no I/O (the object store client connects lazily).
    """
    threads = ThreadService(PostgresThreadStore(pool), journal)
    reader = ContextReader(
        journal,
        threads,
        pinned if pinned is not None else NoPinnedFacts(),
        summaries if summaries is not None else ObjectStoreSummaryReader.from_settings(settings),
    )
    return ApiDeps(settings=settings, journal=journal, pool=pool, threads=threads, context_reader=reader)
