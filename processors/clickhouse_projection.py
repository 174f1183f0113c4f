"""`clickhouse-projection`: the transcript store, projected from `journal.messages`.

Input: `journal.messages` (key `thread_id`, value a version-1 journal message, see
`streams.codecs.journal_messages`). Output: one row per message in the ClickHouse `messages` table
(`sinks.clickhouse`), written in batches of up to `BATCH_SIZE` records or `BATCH_WAIT_S` seconds.

The pure part, `rows(batch, prior)`, decodes each record into a `TranscriptRow` with its search
terms and its context (`processors.transcript_context`: the terms of the message before it in its
thread, from the batch, or `prior` for a thread's first message in it); a record that can never
be projected (no value, not a version-1 message, a key that is not the message's thread) raises
`InvalidMessage` and is dead-lettered. `process` takes `prior` from a per-thread cache, or from
one `TranscriptStore.previous_terms` lookup for the threads the cache lacks; the effect is one
`TranscriptStore.insert(rows)`; the runtime commits the batch's offsets only
after it returned. Idempotence: a row is identified by
(environment, account_id, thread_id, offset) and every read of the store is dedup-safe, so a
redelivered or replayed batch never shows a message twice.

Thread deletions: the processor also consumes `journal.deletions` (a thread's seq-bounded
tombstone, `core.stores.deletions`). For each one it deletes the thread's rows with
`seq <= up_to_seq` (`TranscriptStore.delete_thread`, again on every redelivery: idempotent) and
remembers it, and it never inserts a row of a deleted message (a replay of `journal.messages`, a
redelivery). Within a batch the tombstones are applied before the messages are projected. So
that a replay or a new store never resurrects anything, it loads every tombstone from the
deletion register (`tombstones`, the Postgres table `thread_deletions`) before its first batch:
the register holds a tombstone before its record is published, and it is the authority (the
compacted topic would do too, but would have to be read to its end before projecting, and a
consumer group gives each member only some of its partitions).

ClickHouse unavailable (`TranscriptUnavailable`, a `core.errors.StoreUnavailable`): `process`
raises it as it is, and the runtime waits the outage out (the same rows retried without
limit, capped backoff, rate-limited warnings; nothing dead-lettered or skipped, offsets not
committed) before the batch completes. Any other error goes to the runtime as it is (retried, then
the record that still fails alone is dead-lettered).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from core.journal.models import Message
from core.stores.deletions import TombstoneSource
from core.stores.transcripts import ThreadKey, TranscriptRow, TranscriptStore, TranscriptUnavailable
from core.transcripts.terms import message_terms
from processors.transcript_context import DEFAULT_CACHE_THREADS, Entry, ThreadContext, contexts
from streams.codecs import journal_messages
from streams.codecs.records import header
from streams.deletion_filter import TOPIC as DELETIONS_TOPIC
from streams.deletion_filter import DeletedMessages
from streams.runtime.processor import InvalidMessage, Processor, Record, decoding
from streams.sequencing import SHARD_HEADER, shard_of_record

NAME = "clickhouse-projection"
SOURCE_TOPIC = "journal.messages"
BATCH_SIZE = 4000
"""Rows per insert at most (ClickHouse prefers few large inserts; faust buffers 4096 per partition)."""
BATCH_WAIT_S = 0.25
"""Longest wait to fill a batch: the projection lags the journal by about this much when idle."""

log = logging.getLogger("memstream.clickhouse_projection")


def row_of(
    message: Message, *, terms: tuple[str, ...] | None = None, context_terms: tuple[str, ...] = ()
) -> TranscriptRow:
    """The projected row of a journal message (its tool call flattened into four columns, its
    search terms made from its content, `core.transcripts.terms.message_terms`, unless given)."""
    call = message.tool_call
    return TranscriptRow(
        environment=message.environment,
        account_id=message.account_id,
        agent_id=message.agent_id,
        user_id=message.user_id,
        thread_id=message.thread_id,
        message_id=message.message_id,
        offset=message.offset,
        seq=message.seq,
        role=message.role,
        content=message.content,
        reasoning=message.reasoning,
        tool_call_id=call.id if call is not None else None,
        tool_name=call.name if call is not None else None,
        tool_arguments=call.arguments if call is not None else None,
        tool_result=call.result if call is not None else None,
        created_at=message.created_at,
        token_count=message.token_count,
        terms=message_terms(message.role, message.content) if terms is None else terms,
        context_terms=context_terms,
        shard=message.shard,
    )


def decode(record: Record) -> TranscriptRow:
    """The row of one `journal.messages` record (no context); InvalidMessage if it can never be
    projected."""
    return row_of(decode_message(record))


def decode_message(record: Record) -> Message:
    """The message of one `journal.messages` record; InvalidMessage if it can never be projected."""
    with decoding(record):
        message = journal_messages.decode(record.value)
    if record.key is not None and record.key != message.thread_id.encode("utf-8"):
        raise InvalidMessage(
            record, f"record key {record.key!r} is not the message's thread_id {message.thread_id!r}"
        ) from ValueError("key and value disagree")
    if header(record.headers, SHARD_HEADER) is not None and shard_of_record(record.headers) != message.shard:
        raise InvalidMessage(  # its progress stamp would count it in another shard's seqs
            record, f"the record's shard header does not name the message's shard {message.shard}"
        ) from ValueError("shard header and value disagree")
    return message


def rows(
    batch: Sequence[Record], prior: Mapping[ThreadKey, tuple[str, ...]] | None = None
) -> list[TranscriptRow]:
    """The pure projection of `batch`, in record order, each row with its context
    (`processors.transcript_context.contexts`, the threads' earlier messages given by `prior`;
    without `prior`, no context). Raises InvalidMessage for the first bad record."""
    return project(messages(batch), prior)


def messages(batch: Sequence[Record]) -> list[Message]:
    """The decoded messages of `batch`, in record order; InvalidMessage for the first bad record."""
    return [decode_message(record) for record in batch]


def entries(decoded: Sequence[Message]) -> list[Entry]:
    return [
        ((m.environment, m.account_id, m.agent_id, m.thread_id), m.offset, message_terms(m.role, m.content))
        for m in decoded
    ]


def project(
    decoded: Sequence[Message],
    prior: Mapping[ThreadKey, tuple[str, ...]] | None,
    made: Sequence[Entry] | None = None,
) -> list[TranscriptRow]:
    """The rows of `decoded` (their `entries` when already `made`), with context from `prior`."""
    made = entries(decoded) if made is None else made
    found = contexts(made, prior) if prior is not None else [()] * len(made)
    return [
        row_of(message, terms=entry[2], context_terms=context)
        for message, entry, context in zip(decoded, made, found, strict=True)
    ]


class ClickHouseProjection(Processor):
    """The `clickhouse-projection` processor (module doc). `name` may differ for a second
    consumer group (a rebuild); `table` writes to a rebuild table instead of the live one.
    `tombstones`: where the deletions so far are loaded from before the first batch (without,
    only those of `journal.deletions` records are known)."""

    def __init__(
        self,
        store: TranscriptStore,
        *,
        name: str = NAME,
        table: str | None = None,
        close_store: bool = True,
        batch_size: int | None = BATCH_SIZE,
        batch_wait_s: float | None = BATCH_WAIT_S,
        context_cache_threads: int = DEFAULT_CACHE_THREADS,
        tombstones: TombstoneSource | None = None,
    ) -> None:
        self.name = name
        self.source_topics = (SOURCE_TOPIC, DELETIONS_TOPIC)
        self.store = store
        self.table = table
        self.close_store = close_store
        self.batch_size = batch_size
        self.batch_wait_s = batch_wait_s
        self._schema_ready = False
        self._context = ThreadContext(store, table, context_cache_threads)
        self.deleted = DeletedMessages(tombstones, name)

    async def start(self) -> None:
        """Create the schema and load the tombstones if the stores answer; if not, the first batch
        waits for them."""
        try:
            await self._ensure_schema()
        except TranscriptUnavailable as exc:
            log.warning(
                "%s: ClickHouse unavailable at start, will retry with the first batch: %s", self.name, exc
            )
        await self.deleted.preload()

    async def progress_scope(self) -> str | None:
        """The transcript store's instance id: a ClickHouse created anew (or another node's own
        embedded one) is projected from nothing, not from the progress made on the old one. A
        rebuild (`table`) runs in a consumer group of its own: no scope."""
        if self.table is not None:
            return None
        return f"clickhouse:{await self.store.instance_id()}"

    async def process(self, batch: Sequence[Record]) -> None:
        tombstones, records = self.deleted.split(batch)
        decoded = messages(records)
        if not decoded and not tombstones:
            return
        await self._ensure_schema()
        deleted = await self.deleted.known()
        for tombstone in tombstones:
            await self.store.delete_thread(*tombstone.scope, tombstone.up_to_seq, table=self.table)
            await self.deleted.known([tombstone])
        decoded = [m for m in decoded if not deleted.deleted(m.environment, m.account_id, m.thread_id, m.seq)]
        if not decoded:
            return
        made = entries(decoded)
        prior = await self._context.prior(made)
        await self.store.insert(project(decoded, prior, made), table=self.table)
        self._context.remember(made)

    async def stop(self) -> None:
        if self.close_store:
            await self.store.close()

    async def _ensure_schema(self) -> None:
        if not self._schema_ready:
            await self.store.ensure_schema()
            self._schema_ready = True
