"""What the API needs, built by the node (`memstream.wiring.api`) and injected into `create_app`.

The app opens and closes nothing: the owner of `ApiDeps` opens the pool (and runs the
migrations) and the journal before serving, and closes them after the server stopped. The same
holds for agent memory (`MemoryDeps`): its owner opens the vector index and the embedder, and
closes the index after the server stopped. Without `memory`, the agent and memory routes are
absent and contexts have no pinned facts. The owner also closes `summary_cache` when set
(`await deps.summary_cache.aclose()`). `transcripts` (the journal tools over the transcript store
and the chat model) is likewise opened and closed by its owner; without it the journal tools are
not offered. `object_store` is the readiness probe of `settings.object_store` (`/readyz`); without
it `/readyz` does not check the object store. `processors` (the node's `ProcessorSupervisor`) lets
`/readyz` report processors that are crashed or waiting (`degraded`); without it they are not checked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import asyncpg

from core.config import Settings
from core.memory.agents import AgentService
from core.memory.pinned import MemoryPinnedFacts
from core.memory.recall import Recaller
from core.memory.service import MemoryService
from core.memory.tools import MemoryTools
from core.stores.api_keys import ApiKeyStore
from core.stores.journal import ThreadJournal
from core.thread_deletion import ThreadDeletion
from core.threads import ThreadService
from core.transcripts.tools import JournalTools
from core.turn_context import ContextReader
from core.user_erasure import UserErasure
from sinks.objectstore.health import ObjectStoreProbe
from sinks.redis.summary_cache import RedisSummaryCache
from streams.runtime.status import ProcessorStatus


class ProcessorStatuses(Protocol):
    """What `/readyz` reads of the processors (a `ProcessorSupervisor`)."""

    def statuses(self) -> list[ProcessorStatus]: ...


@dataclass
class MemoryDeps:
    """Agent memory as the API uses it: the service (Postgres), capability bindings, recall, the
    tools and the pinned-facts provider."""

    service: MemoryService
    agents: AgentService
    recaller: Recaller
    tools: MemoryTools
    pinned: MemoryPinnedFacts


@dataclass
class ApiDeps:
    """`settings.environment` scopes every request; `api_keys` authenticates it; `agents` serves
    the capability bindings (memory or not); `pool` is checked by `/readyz`."""

    settings: Settings
    journal: ThreadJournal
    pool: asyncpg.Pool
    api_keys: ApiKeyStore
    agents: AgentService
    threads: ThreadService
    context_reader: ContextReader
    readiness_timeout_s: float = 2.0
    memory: MemoryDeps | None = None
    summary_cache: RedisSummaryCache | None = None
    transcripts: JournalTools | None = None
    object_store: ObjectStoreProbe | None = None
    processors: ProcessorStatuses | None = None
    deletions: ThreadDeletion | None = None
    """Thread deletions (`DELETE /v1/threads/{id}`); without, the route is absent."""
    erasures: UserErasure | None = None
    """User erasures (`DELETE /v1/users/{id}`); without, the route is absent."""
