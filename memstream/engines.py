"""The process's single instances of the in-process engines and models.

An embedded Qdrant Edge shard and a chdb data path can be open only once per process,
and loading an embedding model twice wastes memory. The node builds one `Engines` and hands it to
everything that needs them: the API (recall, transcript search) and the processors (projections);
a `memstream worker` builds one for its processors.
Each is built on first use; `close()` closes what was built.
"""

from __future__ import annotations

import asyncpg

from core.chat.base import ChatModel
from core.config import Settings
from core.embeddings.base import Embedder
from core.sql.engine import SqlEngine
from core.stores.journal import ThreadJournal
from core.stores.message_vectors import MessageVectorStore
from core.stores.transcripts import TranscriptStore
from core.stores.vectors import VectorIndex
from sinks.chat.factory import build_chat_model
from sinks.clickhouse.factory import build_sql_engine, build_transcript_store
from sinks.clickhouse.store import ClickHouseTranscriptStore
from sinks.clickhouse.vectors import ClickHouseMessageVectors
from sinks.embeddings.bm25 import Bm25Sparse
from sinks.embeddings.factory import build_embedder
from sinks.qdrant.factory import build_index


class Engines:
    def __init__(
        self, settings: Settings, *, journal: ThreadJournal | None = None, pool: asyncpg.Pool | None = None
    ) -> None:
        self.settings = settings
        self.journal = journal
        """The journal, for processors that read it: the node's (the writers of its shards behind a
        `core.sharding.journal.ShardedJournal`), or in a worker read-only views of every shard
        (`sinks.slatedb.reader`, a `ShardedFollower`); None when the process has none. Not closed by
        `close()`: its owner closes it."""
        self.pool = pool
        """The process's Postgres pool (agent memory, agents), for processors; None when it has none.
        Not closed by `close()`: its owner closes it."""
        self._chat_model: ChatModel | None = None
        self._index: VectorIndex | None = None
        self._embedder: Embedder | None = None
        self._sparse: Bm25Sparse | None = None
        self._transcripts: ClickHouseTranscriptStore | None = None
        self._sql: SqlEngine | None = None

    def index(self) -> VectorIndex:
        if self._index is None:
            self._index = build_index(self.settings)
        return self._index

    def embedder(self) -> Embedder:
        if self._embedder is None:
            self._embedder = build_embedder(self.settings.embedding_model)
        return self._embedder

    def sparse(self) -> Bm25Sparse:
        if self._sparse is None:
            self._sparse = Bm25Sparse()
        return self._sparse

    def chat_model(self) -> ChatModel:
        """The configured chat model (offline by default), shared by the flush and the summarizer."""
        if self._chat_model is None:
            self._chat_model = build_chat_model(self.settings.chat_model)
        return self._chat_model

    def transcripts(self) -> TranscriptStore:
        """The transcript store (`settings.clickhouse`), shared by the `clickhouse-projection`
        processor and the transcript tools. Built without I/O: callers run `ensure_schema()`
        (idempotent) before relying on the tables."""
        return self._clickhouse()

    def message_vectors(self) -> MessageVectorStore:
        """The message vectors (`settings.transcript_vectors`), beside the transcript store and on
        its client (closed with it)."""
        return ClickHouseMessageVectors(self._clickhouse())

    def sql(self) -> SqlEngine:
        """The SQL endpoint's engine: the transcript store's ClickHouse, on a pool of its own
        (`settings.sql.max_concurrent_queries` threads with chdb)."""
        if self._sql is None:
            self._sql = build_sql_engine(self.settings)
        return self._sql

    def _clickhouse(self) -> ClickHouseTranscriptStore:
        if self._transcripts is None:
            self._transcripts = build_transcript_store(self.settings)
        return self._transcripts

    async def close(self) -> None:
        sql, self._sql = self._sql, None
        if sql is not None:
            await sql.close()
        transcripts, self._transcripts = self._transcripts, None
        if transcripts is not None:
            await transcripts.close()
        chat, self._chat_model = self._chat_model, None
        if chat is not None:
            await chat.close()
        index, self._index = self._index, None
        if index is not None:
            await index.close()
        embedder, self._embedder = self._embedder, None
        close = getattr(embedder, "close", None)
        if close is not None:
            await close()
