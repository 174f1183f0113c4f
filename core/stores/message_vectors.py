"""Message vectors: the dense vectors of transcript messages, the semantic signal of transcript search.

Written by the opt-in `transcript-vectors` processor (one row per user/assistant message with
text), read by `journal_message_search` when `settings.transcript_vectors` is on
(`core.transcripts.rerank`). One implementation (`sinks/clickhouse/vectors.py`) keeps them in a
table beside the transcript store's `messages`, in the same ClickHouse database.

A vector is identified like its message, (environment, account_id, thread_id, offset), and carries
the message id and the embedding model's id: a vector is only ever used for the very message and
model it was made from. Inserting the same vector again (redelivery, replay) never makes a read
return it twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from core.stores.transcripts import MessageHit, Period, TranscriptScope


@dataclass(frozen=True)
class MessageVector:
    """The int8 vector (`core.transcripts.fusion.quantize`) of one message's content by `model`."""

    environment: str
    account_id: str
    agent_id: str
    user_id: str | None
    thread_id: str
    offset: int
    message_id: str
    model: str
    vector: bytes
    seq: int
    """The message's journal seq (a thread deletion deletes the vectors of seqs up to its bound)."""
    shard: int = 0
    """The message's journal shard (`core.sharding.shards`): `seq` counts within it."""


@dataclass(frozen=True)
class Candidate:
    """A BM25 search hit and the cosine of its message's vector by the asked model to the query
    vector (`core.transcripts.fusion.cosine`, computed by the store); None when the message has
    no such vector yet, or no query vector was given."""

    hit: MessageHit
    cosine: float | None


class MessageVectorStore(Protocol):
    async def ensure_schema(self) -> None:
        """Create the vectors table if missing (idempotent)."""

    async def instance_id(self) -> str:
        """The id of the store holding the vectors (as `TranscriptStore.instance_id`)."""

    async def insert_vectors(self, vectors: Sequence[MessageVector]) -> None:
        """Write `vectors` (duplicates allowed); returns once they are stored. Raises
        `TranscriptUnavailable` on a transient failure (a retry of the same rows is harmless)."""

    async def candidates(
        self,
        scope: TranscriptScope,
        query: str,
        *,
        model: str,
        query_vector: Sequence[float] | None,
        thread_id: str | None = None,
        limit: int,
        period: Period | None = None,
    ) -> list[Candidate]:
        """The BM25 search of `TranscriptStore.search` (same scope, period and role rules, same order), each
        hit with the cosine of its message's vector by `model` to `query_vector`, in the same
        query (the vectors never leave the store)."""

    async def clock(self) -> datetime:
        """The store's current time, on the clock that stamps inserts (for `prune`)."""

    async def prune(self, inserted_before: datetime) -> None:
        """Delete the vectors inserted before `inserted_before` whose message is not in the live
        `messages` table (after a rebuild removed it). Operator write, never reachable from a
        tenant's request."""

    async def delete_thread(self, environment: str, account_id: str, thread_id: str, up_to_seq: int) -> int:
        """Delete the thread's vectors with `seq <= up_to_seq` (a thread deletion's tombstone; a
        thread id used again keeps its newer vectors); returns how many rows there were (copies
        count each). Idempotent. Raises `TranscriptUnavailable` on a transient failure."""

    async def count_thread_rows(
        self, environment: str, account_id: str, thread_id: str, up_to_seq: int
    ) -> int:
        """The thread's vectors with `seq <= up_to_seq` (copies count each): what a completed
        deletion left (`memstream verify`)."""

    async def close(self) -> None:
        """Release what this store holds (a store sharing the process's client leaves it open)."""
