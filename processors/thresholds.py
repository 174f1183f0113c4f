"""`thresholds`: counts each thread's messages and tokens since its last summary and requests a
compaction when a thread crosses `TOKEN_LIMIT` tokens or `MESSAGE_LIMIT` messages.

Input: `journal.messages`. Output: `compaction.requested` (key thread_id; `request_payload`).

Per message, in one Redis script (`sinks.redis.thresholds.ThresholdStore.count`): claim the message
(idempotent under redelivery and replay), add it to the thread's counters, check the thresholds
(`crossing`, the pure rule) and, when crossed, take the thread's flush-and-summarize guard. Only
a crossing that took the guard emits a request: while a compaction is in flight (guard held) no
second one is requested. The summarizer releases the guard and resets the counters
(`ThresholdStore.release_guard` / `reset_counters`).

Redis holds only derived state. When a thread's state is missing (Redis wiped or restarted empty,
or a new thread) or stale (just summarized), it is rebuilt from the journal: messages after the
last summary's `last_message_offset` (-1 without a summary) up to and including the current one
are summed and claimed (`fold`), so the request still comes at the message that crosses.

`process` returns only once every request of the batch is confirmed by the broker (idempotent
producer), so offsets are committed after the requests are durable. A request decided but not
confirmed (crash, broker error) is re-sent when its message is redelivered. A record that is not
a valid journal message is dead-lettered (InvalidMessage) before anything of its batch is counted.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from confluent_kafka import KafkaError, Producer
from confluent_kafka import Message as KafkaMessage

from memstream.config import Settings
from memstream.engines import Engines
from memstream.journal.base import Journal
from memstream.journal.models import Message
from memstream.summaries import SummaryWriter
from sinks.redis.thresholds import DEFAULT_NAMESPACE, Outcome, ThreadScope, ThresholdStore
from streams.events import InvalidEvent, decode_message
from streams.producer import make_producer
from streams.runtime.errors import ProcessorCannotRun, SinkUnavailable
from streams.runtime.processor import InvalidMessage, Processor, Record
from streams.topics import topic_name

NAME = "thresholds"
SOURCE_TOPIC = "journal.messages"
OUTPUT_TOPIC = "compaction.requested"
REQUEST_SCHEMA_VERSION = 1

TOKEN_LIMIT = 2_000
"""A thread is compacted once this many tokens arrived since its last summary..."""
MESSAGE_LIMIT = 50
"""...or this many messages, whichever comes first."""

JOURNAL_PAGE = 1000
DELIVERY_TIMEOUT_S = 30.0

log = logging.getLogger("memstream.thresholds")

Reason = Literal["tokens", "messages"]
Clock = Callable[[], datetime]


class NeedsNodeJournal(ProcessorCannotRun):
    """The processor was started without the node's journal (e.g. `memstream worker thresholds`):
    it is not restarted."""

    code = "needs_node_journal"


class RequestNotDelivered(SinkUnavailable):
    """The broker did not confirm a compaction request: the batch is retried (an outage)."""

    code = "compaction_request_not_delivered"


# ---------------------------------------------------------------- the pure rule


@dataclass(frozen=True, slots=True)
class Counters:
    """A thread's counts since its last summary."""

    tokens: int = 0
    messages: int = 0


def crossing(
    counters: Counters, *, token_limit: int = TOKEN_LIMIT, message_limit: int = MESSAGE_LIMIT
) -> Reason | None:
    """Which threshold `counters` reached ("tokens" first), or None."""
    if counters.tokens >= token_limit:
        return "tokens"
    if counters.messages >= message_limit:
        return "messages"
    return None


def advance(
    counters: Counters,
    token_count: int,
    *,
    token_limit: int = TOKEN_LIMIT,
    message_limit: int = MESSAGE_LIMIT,
) -> tuple[Counters, Reason | None]:
    """The counters after one more message of `token_count` tokens, and the threshold it reaches."""
    after = Counters(tokens=counters.tokens + token_count, messages=counters.messages + 1)
    return after, crossing(after, token_limit=token_limit, message_limit=message_limit)


def fold(messages: Sequence[Message], agent_id: str, up_to: int) -> tuple[Counters, list[str]]:
    """The counters of `messages` (the journal since the last summary) of `agent_id` with offset
    <= `up_to`, and their message ids (to claim)."""
    counters = Counters()
    ids: list[str] = []
    for message in messages:
        if message.offset <= up_to and message.agent_id == agent_id:
            counters, _ = advance(counters, message.token_count)
            ids.append(message.message_id)
    return counters, ids


def scope_of(message: Message) -> ThreadScope:
    return ThreadScope(message.environment, message.account_id, message.agent_id, message.thread_id)


def request_payload(message: Message, outcome: Outcome, requested_at: datetime) -> dict[str, Any]:
    """The `compaction.requested` value for the crossing `outcome` decided at `message`."""
    assert outcome.base is not None and outcome.tokens is not None and outcome.messages is not None
    return {
        "schema_version": REQUEST_SCHEMA_VERSION,
        "environment": message.environment,
        "account_id": message.account_id,
        "agent_id": message.agent_id,
        "user_id": message.user_id,
        "thread_id": message.thread_id,
        "from_offset": outcome.base,
        "to_offset": message.offset,
        "tokens": outcome.tokens,
        "messages": outcome.messages,
        "reason": outcome.reason,
        "requested_at": requested_at.astimezone(UTC).isoformat().replace("+00:00", "Z"),
    }


def decode(record: Record) -> Message:
    try:
        return decode_message(record.value)
    except InvalidEvent as exc:
        raise InvalidMessage(record, str(exc)) from exc


# ---------------------------------------------------------------- the processor


class Thresholds(Processor):
    """The `thresholds` processor (module doc). `journal` and `summaries` (its `current`) are what
    the rebuild reads; `summaries` may instead be opened by `open_summaries` in `start`, and
    `producer` is built in `start` when not given. Construction does no I/O."""

    def __init__(
        self,
        settings: Settings,
        store: ThresholdStore,
        journal: Journal | None,
        summaries: SummaryWriter | None,
        *,
        open_summaries: Callable[[], SummaryWriter] | None = None,
        name: str = NAME,
        producer: Producer | None = None,
        clock: Clock | None = None,
        close_store: bool = True,
    ) -> None:
        self.name = name
        self.source_topics = (SOURCE_TOPIC,)
        self.settings = settings
        self.store = store
        self.journal = journal
        self._summaries = summaries
        self._open_summaries = open_summaries
        self.producer = producer
        self.clock: Clock = clock or (lambda: datetime.now(UTC))
        self.close_store = close_store
        self.topic = topic_name(settings, OUTPUT_TOPIC)

    async def start(self) -> None:
        if self.journal is None:
            raise NeedsNodeJournal(
                "the thresholds processor rebuilds counters from the journal and runs inside the "
                "node (`memstream up` / `memstream node`), not as a separate worker"
            )
        if self._summaries is None:
            if self._open_summaries is None:
                raise ValueError("the thresholds processor needs `summaries` or `open_summaries`")
            self._summaries = self._open_summaries()
        if self.producer is None:
            self.producer = make_producer(self.settings, client_id=f"memstream.{self.name}", logger=log)

    async def stop(self) -> None:
        if self.close_store:
            await self.store.aclose()

    async def outcome(self, message: Message) -> Outcome:
        """Count `message` (rebuilding the thread's state from the journal when needed)."""
        scope = scope_of(message)
        for _ in range(3):
            outcome = await self.store.count(scope, message.message_id, message.offset, message.token_count)
            if outcome.kind != "rebuild":
                return outcome
            outcome = await self.rebuild(message)
            if outcome.kind != "exists":
                return outcome
        raise RuntimeError(f"thread state of {scope} keeps changing during its rebuild")  # transient

    async def rebuild(self, message: Message) -> Outcome:
        """Rebuild the thread's counters from the journal since its last summary (module doc)."""
        if self.journal is None:
            raise NeedsNodeJournal("the thresholds processor needs the node's journal")
        if self._summaries is None:
            raise RuntimeError("the thresholds processor was not started")
        summary = await self._summaries.current(message.thread, message.agent_id)
        last = summary.last_message_offset if summary is not None else -1
        since: list[Message] = []
        cursor = last
        while cursor < message.offset:
            page = await self.journal.after(message.thread, cursor, JOURNAL_PAGE)
            if not page:
                break
            since.extend(page)
            cursor = page[-1].offset
        counters, ids = fold(since, message.agent_id, message.offset)
        log.info(
            "rebuilt counters of %s/%s/%s/%s from the journal: %d messages, %d tokens since offset %d",
            message.environment,
            message.account_id,
            message.agent_id,
            message.thread_id,
            counters.messages,
            counters.tokens,
            last + 1,
        )
        return await self.store.install(
            scope_of(message),
            base=last + 1,
            tokens=counters.tokens,
            messages=counters.messages,
            message_ids=ids,
            offset=message.offset,
            counted=message.offset > last,
        )

    async def process(self, batch: Sequence[Record]) -> None:
        messages = [decode(record) for record in batch]  # all-or-nothing before any effect
        requests: list[tuple[Message, Outcome]] = []
        for message in messages:
            outcome = await self.outcome(message)
            if outcome.emits:
                requests.append((message, outcome))
        if not requests:
            return
        now = self.clock()
        await asyncio.to_thread(self._produce, [(m, request_payload(m, o, now)) for m, o in requests])
        for message, _ in requests:
            await self.store.mark_sent(scope_of(message), message.offset)
            log.info(
                "compaction requested for %s/%s/%s at offset %d",
                message.environment,
                message.account_id,
                message.thread_id,
                message.offset,
            )

    def _produce(self, requests: Sequence[tuple[Message, dict[str, Any]]]) -> None:
        producer = self.producer
        if producer is None:
            raise RuntimeError("the thresholds processor was not started")
        errors: list[str] = []

        def delivered(err: KafkaError | None, _msg: KafkaMessage) -> None:
            if err is not None:
                errors.append(str(err))

        for message, payload in requests:
            producer.produce(
                self.topic,
                key=message.thread_id.encode("utf-8"),
                value=json.dumps(payload).encode("utf-8"),
                on_delivery=delivered,
            )
        if producer.flush(DELIVERY_TIMEOUT_S) != 0 or errors:
            raise RequestNotDelivered(f"compaction requests not confirmed: {errors or 'timed out'}")


def store_namespace(settings: Settings) -> str:
    """The Redis namespace of one deployment's counters: its journal (the authority they derive
    from), so deployments sharing a Redis never share counters."""
    digest = hashlib.sha256(settings.journal.encode("utf-8")).hexdigest()[:16]
    return f"{DEFAULT_NAMESPACE}/{digest}"


def open_store(settings: Settings) -> ThresholdStore:
    """The deployment's threshold state on `settings.redis` (its own client: `aclose` it). The
    summarizer uses it too: `release_guard(scope_of(message))` and `reset_counters(scope, offset)`
    after its summary is written. Does no I/O."""
    return ThresholdStore.from_url(
        settings.redis,
        token_limit=TOKEN_LIMIT,
        message_limit=MESSAGE_LIMIT,
        namespace=store_namespace(settings),
    )


def create(settings: Settings, *, engines: Engines | None = None) -> Thresholds:
    """The processor for `settings` (`settings.redis`, `settings.object_store`) with the node's
    journal (`engines.journal`). Without it the processor refuses to start (NeedsNodeJournal)."""
    from sinks.objectstore.summaries import ObjectStoreSummaryWriter

    store = open_store(settings)
    journal = engines.journal if engines is not None else None
    return Thresholds(
        settings,
        store,
        journal,
        None,
        open_summaries=lambda: ObjectStoreSummaryWriter.from_settings(settings),
    )
