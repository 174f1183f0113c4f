"""`transcript-vectors`: the dense vectors of transcript messages, projected from `journal.messages`.

Opt-in (`settings.transcript_vectors`; off by default: the processor is then neither hosted nor
counted among the topic's consumers). Input: `journal.messages` (key `thread_id`, value a
version-1 journal message, `streams.codecs.journal_messages`), in a consumer group of its own.
Output: for each user or assistant message with text, one `MessageVector` (its content embedded by
the node's embedder - the model agent memory's index uses - and quantized to int8,
`core.transcripts.fusion.quantize`) in the `message_vectors` table beside the transcript store's
`messages` (`core.stores.message_vectors`), read by `journal_message_search`'s re-rank
(`core.transcripts.rerank`). Other messages (system, tool, empty content) get no vector.

The pure part, `selected(batch)`, decodes the batch and keeps the messages to embed; a record that
can never be projected (no value, not a version-1 message, a key that is not the message's thread)
raises `InvalidMessage` and is dead-lettered. `process` embeds the texts (the offline model runs
each text alone, so a vector is a function of its text only), then makes one
`MessageVectorStore.insert_vectors`; the runtime commits the batch's offsets only after it
returned. Idempotence: a vector is identified like its message (environment, account_id,
thread_id, offset) and every read is dedup-safe, so a redelivered or replayed batch writes the
same rows again and no read sees two.

Thread deletions: like `clickhouse-projection`, the processor also consumes `journal.deletions`
and knows every tombstone (`streams.deletion_filter.DeletedMessages`, loaded from the deletion
register, `tombstones`, before its first batch). For each tombstone it deletes the thread's
vectors with `seq <= up_to_seq` (`MessageVectorStore.delete_thread`, again on every redelivery:
idempotent; a thread id used again keeps its newer vectors), and it never embeds a deleted
message (a replay, a redelivery). Within a batch the tombstones are applied first.

Cost: an embedding per message (offline MiniLM: ~6.5 ms of CPU per LoCoMo turn, measured with
`bench/bench_transcript_vectors.py`), hence opt-in and small batches (`BATCH_SIZE`). ClickHouse
unavailable (`TranscriptUnavailable`): raised as it is, the runtime waits the outage out (offsets
not committed). Other errors (the embedder's) go to the
runtime as they are (retried, then the record that still fails alone is dead-lettered).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from core.embeddings.base import Embedder
from core.journal.models import Message
from core.stores.deletions import TombstoneSource
from core.stores.message_vectors import MessageVector, MessageVectorStore
from core.stores.transcripts import TranscriptUnavailable
from core.transcripts.fusion import quantize
from core.transcripts.search import SEARCHED_ROLES
from streams.codecs import journal_messages
from streams.deletion_filter import TOPIC as DELETIONS_TOPIC
from streams.deletion_filter import DeletedMessages
from streams.runtime.processor import InvalidMessage, Processor, Record, decoding

NAME = "transcript-vectors"
SOURCE_TOPIC = "journal.messages"
BATCH_SIZE = 64
"""Records per batch at most (~0.5 s of embedding on two cores offline): offsets are committed
often, and a stopping node waits for at most one such batch."""
BATCH_WAIT_S = 0.25
"""Longest wait to fill a batch."""

log = logging.getLogger("memstream.transcript_vectors")


def decode_message(record: Record) -> Message:
    """The message of one `journal.messages` record; InvalidMessage if it can never be projected."""
    with decoding(record):
        message = journal_messages.decode(record.value)
    if record.key is not None and record.key != message.thread_id.encode("utf-8"):
        raise InvalidMessage(
            record, f"record key {record.key!r} is not the message's thread_id {message.thread_id!r}"
        ) from ValueError("key and value disagree")
    return message


def embeddable(message: Message) -> bool:
    """Whether `message` gets a vector: a user or assistant message whose content is not blank."""
    return message.role in SEARCHED_ROLES and bool(message.content.strip())


def selected(batch: Sequence[Record]) -> list[Message]:
    """The messages of `batch` to embed, in record order; InvalidMessage for the first bad record."""
    return [m for m in (decode_message(record) for record in batch) if embeddable(m)]


def vector_of(message: Message, model: str, vector: Sequence[float]) -> MessageVector:
    """The stored vector of `message`: `vector` (its content's embedding by `model`) as int8."""
    return MessageVector(
        environment=message.environment,
        account_id=message.account_id,
        agent_id=message.agent_id,
        user_id=message.user_id,
        thread_id=message.thread_id,
        offset=message.offset,
        message_id=message.message_id,
        model=model,
        vector=quantize(vector),
        seq=message.seq,
        shard=message.shard,
    )


class TranscriptVectors(Processor):
    """The `transcript-vectors` processor (module doc). `tombstones`: where the deletions so far
    are loaded from before the first batch (without, only those of `journal.deletions` records)."""

    def __init__(
        self,
        store: MessageVectorStore,
        embedder: Embedder,
        *,
        name: str = NAME,
        batch_size: int | None = BATCH_SIZE,
        batch_wait_s: float | None = BATCH_WAIT_S,
        tombstones: TombstoneSource | None = None,
    ) -> None:
        self.name = name
        self.source_topics = (SOURCE_TOPIC, DELETIONS_TOPIC)
        self.store = store
        self.embedder = embedder
        self.batch_size = batch_size
        self.batch_wait_s = batch_wait_s
        self._schema_ready = False
        self.deleted = DeletedMessages(tombstones, name)

    async def start(self) -> None:
        """Create the table and load the tombstones if the stores answer; if not, the first batch
        waits for them."""
        try:
            await self._ensure_schema()
        except TranscriptUnavailable as exc:
            log.warning(
                "%s: ClickHouse unavailable at start, will retry with the first batch: %s", self.name, exc
            )
        await self.deleted.preload()

    async def progress_scope(self) -> str | None:
        """The store's instance id (as `clickhouse-projection`): a ClickHouse created anew is
        projected from nothing."""
        return f"clickhouse:{await self.store.instance_id()}"

    async def process(self, batch: Sequence[Record]) -> None:
        tombstones, records = self.deleted.split(batch)
        messages = selected(records)
        if not messages and not tombstones:
            return
        await self._ensure_schema()
        deleted = await self.deleted.known()
        for tombstone in tombstones:
            await self.store.delete_thread(*tombstone.scope, tombstone.up_to_seq)
            await self.deleted.known([tombstone])
        messages = [
            m for m in messages if not deleted.deleted(m.environment, m.account_id, m.thread_id, m.seq)
        ]
        if not messages:
            return
        model = self.embedder.model_id
        vectors = await self.embedder.embed([m.content for m in messages])
        await self.store.insert_vectors(
            [vector_of(m, model, v) for m, v in zip(messages, vectors, strict=True)]
        )

    async def stop(self) -> None:
        await self.store.close()

    async def _ensure_schema(self) -> None:
        if not self._schema_ready:
            await self.store.ensure_schema()
            self._schema_ready = True
