"""The stores of `memstream export` / `memstream import` (`memstream.ops.account_export.AccountStores`)
over the node's Postgres pool, journal writer and summary cache."""

from __future__ import annotations

import asyncpg

from core.config import Settings
from core.stores.journal import ThreadJournal
from core.summaries.layered import CachedSummaryWriter, MonotonicSummaryStore
from core.summaries.models import SummaryCache
from memstream.ops.account_export import AccountStores
from sinks.objectstore.summaries import ObjectStoreSummaryWriter
from sinks.postgres.account_restore import PostgresAccountRestore
from sinks.postgres.agents import PostgresAgents
from sinks.postgres.compactions import PostgresSummaryVersions
from sinks.postgres.quarantine import PostgresQuarantineStore
from sinks.postgres.threads import PostgresThreadStore


def build_account_stores(
    settings: Settings, pool: asyncpg.Pool, journal: ThreadJournal, summary_cache: SummaryCache
) -> AccountStores:
    """Summaries are written as the summarizer writes them: through the cache, above the version
    floor (`core.summaries.layered`), into `settings.object_store`."""
    objects = ObjectStoreSummaryWriter.from_settings(settings)
    return AccountStores(
        threads=PostgresThreadStore(pool),
        journal=journal,
        summary_versions=objects,
        summaries=MonotonicSummaryStore(
            CachedSummaryWriter(summary_cache, objects), PostgresSummaryVersions(pool)
        ),
        agents=PostgresAgents(pool),
        entries=PostgresQuarantineStore(pool),
        restore=PostgresAccountRestore(pool),
    )
