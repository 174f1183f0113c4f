"""`thresholds`: counts each thread's messages and tokens since its last summary and requests a
compaction when a thread crosses `TOKEN_LIMIT` tokens or `MESSAGE_LIMIT` messages.

Input: `journal.messages` (less deleted messages: `streams.deletion_filter`). Output:
`compaction.requested` (key thread_id; `compaction_request`).

Per message, in one Redis script (`sinks.redis.thresholds.RedisThresholdStore.count`; a batch's
messages in one call of `count_batch` up to the first that needs the journal): add it to the
thread's counters when it is the next offset (a message already counted changes nothing, so
redelivery, replay and republish never count twice), check the thresholds (`crossing`, the pure
rule) and, when crossed, take the thread's flush-and-summarize guard. Only a crossing that took the
guard emits a request: while a compaction is in flight (guard held) no second one is requested.
The summarizer releases the guard and resets the counters (`ThresholdStore.release_guard` /
`reset_counters`).

The counters are always the pure rule's `fold` of the journal since the last summary up to the
offset they reach, whatever order messages arrive in. Redis holds only derived state: when a
thread's state is missing (Redis wiped or restarted empty, or a new thread) or stale (just
summarized), it is rebuilt from the journal: the agent's messages after the last summary's
`last_message_offset` (-1 without a summary) up to the current message, and at least up to where
the counting had got before the reset (an old message republished after a restart may come first),
are summed (`fold`). When messages before the current one were never counted (records lost on
their way, or another agent's in between), those are read from the journal and added (`gap`). So
the request comes at the message that crosses, or - when the rebuild finds a crossing among
messages counted earlier - at once, up to where the counting had got.

Every request is recorded in Postgres as its thread's compaction in flight
(`sinks.postgres.compactions`) BEFORE it is produced, and a crossing the guard held back
("guarded") is recorded there too; the summarizer settles both. Redis and the broker may then lose
everything: `processors.compaction_recovery` requests an open compaction again, or re-evaluates a
held-back crossing (`reevaluate`), through this processor's `emit`.

`process` returns only once every request of the batch is confirmed by the broker (idempotent
producer), so offsets are committed after the requests are durable. A request decided but not
confirmed (crash, broker error) is re-sent when its message is redelivered. While the runtime
stops (`stopping`), a wait on the broker is given up at once (the batch is redelivered to the next
run). A record that is not a valid journal message is dead-lettered (InvalidMessage) before
anything of its batch is counted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from core.config import Settings
from core.journal.models import Message, ThreadRef
from core.journal.reading import messages_between
from core.stores.compactions import CompactionLedger
from core.stores.deletions import TombstoneSource
from core.stores.journal import ThreadJournal
from core.stores.thresholds import Outcome, ThreadScope, ThresholdStore
from core.summaries.models import SummaryWriter
from processors.errors import NeedsNodeJournal
from streams import deletion_filter
from streams.codecs import compaction_requested
from streams.codecs.compaction_requested import CompactionRequest, timestamp
from streams.codecs.records import EncodedEvent
from streams.output import TopicOutput
from streams.producer import BatchPublisher, OutgoingRecord
from streams.runtime.errors import SinkUnavailable
from streams.runtime.processor import Processor, Record
from streams.topics import topic_name

NAME = "thresholds"
SOURCE_TOPIC = "journal.messages"
OUTPUT_TOPIC = "compaction.requested"

TOKEN_LIMIT = 2_000
"""A thread is compacted once this many tokens arrived since its last summary..."""
MESSAGE_LIMIT = 50
"""...or this many messages, whichever comes first."""


log = logging.getLogger("memstream.thresholds")

Reason = Literal["tokens", "messages"]
Clock = Callable[[], datetime]


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


def fold(messages: Sequence[Message], agent_id: str, up_to: int) -> Counters:
    """The counters of `messages` (the journal since the last summary) of `agent_id` with offset
    <= `up_to`."""
    counters = Counters()
    for message in messages:
        if message.offset <= up_to and message.agent_id == agent_id:
            counters, _ = advance(counters, message.token_count)
    return counters


def scope_of(message: Message) -> ThreadScope:
    return ThreadScope(message.environment, message.account_id, message.agent_id, message.thread_id)


def compaction_request(message: Message, outcome: Outcome, requested_at: datetime) -> CompactionRequest:
    """The `compaction.requested` value for the crossing `outcome` decided while counting `message`
    (the thread's; the request reaches `outcome.offset`)."""
    assert outcome.base is not None and outcome.tokens is not None and outcome.messages is not None
    assert outcome.offset is not None and outcome.reason is not None
    return CompactionRequest.model_validate(
        {
            "environment": message.environment,
            "account_id": message.account_id,
            "agent_id": message.agent_id,
            "user_id": message.user_id,
            "thread_id": message.thread_id,
            "from_offset": outcome.base,
            "to_offset": outcome.offset,
            "tokens": outcome.tokens,
            "messages": outcome.messages,
            "reason": outcome.reason,
            "requested_at": timestamp(requested_at),
        }
    )


@dataclass(frozen=True, slots=True)
class ThresholdPlan:
    """What counting a batch decided: the requests to record, produce and mark sent (in message
    order), and per thread the highest crossing a held guard kept back (to record)."""

    requests: list[CompactionRequest]
    held_back: dict[ThreadScope, int]


def plan(counted: Sequence[tuple[Message, Outcome]], now: datetime) -> ThresholdPlan:
    """The decision for messages counted in order (`(message, its outcome)`), requested at `now`:
    an outcome that emits becomes a request; a crossing the guard held back is kept per thread."""
    requests: list[CompactionRequest] = []
    held_back: dict[ThreadScope, int] = {}
    for message, outcome in counted:
        if outcome.emits:
            requests.append(compaction_request(message, outcome, now))
        elif outcome.kind == "guarded" and outcome.offset is not None:
            scope = scope_of(message)
            held_back[scope] = max(held_back.get(scope, -1), outcome.offset)
    return ThresholdPlan(requests, held_back)


# ---------------------------------------------------------------- the processor


class Thresholds(Processor):
    """The `thresholds` processor (module doc). `journal` and `summaries` (its `current`) are what
    the rebuild reads; `summaries` may instead be opened by `open_summaries` in `start`. `ledger`
    is the node's durable record of compactions (Postgres); `publisher` (to compaction.requested)
    is built in `start` when not given. Construction does no I/O; `start` refuses
    (NeedsNodeJournal) without the journal or the ledger."""

    def __init__(
        self,
        settings: Settings,
        store: ThresholdStore,
        journal: ThreadJournal | None,
        summaries: SummaryWriter | None,
        *,
        ledger: CompactionLedger | None,
        open_summaries: Callable[[], SummaryWriter] | None = None,
        name: str = NAME,
        publisher: BatchPublisher | None = None,
        clock: Clock | None = None,
        close_store: bool = True,
        tombstones: TombstoneSource | None = None,
    ) -> None:
        self.name = name
        self.source_topics = (SOURCE_TOPIC, deletion_filter.TOPIC)
        self.deleted = deletion_filter.DeletedMessages(tombstones, name)
        self.settings = settings
        self.store = store
        self.journal = journal
        self.ledger = ledger
        self._summaries = summaries
        self._open_summaries = open_summaries
        self.output = TopicOutput(
            settings,
            topic_name(settings, OUTPUT_TOPIC),
            client_id=f"memstream.{name}",
            logger=log,
            not_confirmed=RequestNotDelivered,
            publisher=publisher,
        )
        self.clock: Clock = clock or (lambda: datetime.now(UTC))
        self.close_store = close_store

    async def start(self) -> None:
        if self.journal is None or self.ledger is None:
            raise NeedsNodeJournal(
                "the thresholds processor rebuilds counters from the journal and records compactions "
                "in the node's Postgres pool: it runs inside the node (`memstream up` / "
                "`memstream node`), not as a separate worker"
            )
        if self._summaries is None:
            if self._open_summaries is None:
                raise ValueError("the thresholds processor needs `summaries` or `open_summaries`")
            self._summaries = self._open_summaries()
        self.output.start()

    def stopping(self) -> None:
        self.output.stopping(f"the {self.name} processor is stopping")

    async def stop(self) -> None:
        self.output.close()
        if self.close_store:
            await self.store.aclose()

    async def outcomes(self, messages: Sequence[Message]) -> list[Outcome]:
        """Count `messages` in order, as `outcome` one after another: in one store call
        (`count_batch`) up to the first that needs the journal, which is then resolved, and so on
        from the next."""
        outcomes: list[Outcome] = []
        while len(outcomes) < len(messages):
            rest = messages[len(outcomes) :]
            answers = await self.store.count_batch([(scope_of(m), m.offset, m.token_count) for m in rest])
            if not answers:
                raise RuntimeError("the threshold store counted none of a batch")  # a store bug
            *done, last = answers
            outcomes += done
            outcomes.append(await self.outcome(rest[len(done)], last))
        return outcomes

    async def outcome(self, message: Message, counted: Outcome | None = None) -> Outcome:
        """Count `message` (rebuilding the thread's state from the journal, or adding the messages
        before it that were never counted, when needed). `counted`: what the store's `count` of
        it already answered, if it was counted."""
        scope = scope_of(message)
        for _ in range(3):
            if counted is None:
                outcome = await self.store.count(scope, message.offset, message.token_count)
            else:
                outcome, counted = counted, None
            if outcome.kind == "rebuild":
                outcome = await self.rebuild(message, outcome)
            elif outcome.kind == "gap":
                outcome = await self.fill_gap(message, outcome)
            if outcome.kind != "exists":
                return outcome
        raise RuntimeError(f"thread state of {scope} keeps changing during its rebuild")  # transient

    async def rebuild(self, message: Message, seen: Outcome) -> Outcome:
        """Rebuild the thread's counters from the journal since its last summary (module doc)."""
        if self._summaries is None:
            raise RuntimeError("the thresholds processor was not started")
        summary = await self._summaries.current(message.thread, message.agent_id)
        last = summary.last_message_offset if summary is not None else -1
        upto = max(message.offset, last, seen.offset if seen.offset is not None else -1)
        counters = fold(await self._journal_between(message.thread, last, upto), message.agent_id, upto)
        log.info(
            "rebuilt counters of %s/%s/%s/%s from the journal: %d messages, %d tokens from offset %d to %d",
            message.environment,
            message.account_id,
            message.agent_id,
            message.thread_id,
            counters.messages,
            counters.tokens,
            last + 1,
            upto,
        )
        return await self.store.install(
            scope_of(message),
            seen,
            base=last + 1,
            upto=upto,
            tokens=counters.tokens,
            messages=counters.messages,
            offset=message.offset,
        )

    async def fill_gap(self, message: Message, seen: Outcome) -> Outcome:
        """Add the agent's journal messages after the counters' end (`seen.offset`) up to and
        including `message` (module doc)."""
        assert seen.base is not None and seen.offset is not None
        assert seen.tokens is not None and seen.messages is not None
        added = fold(
            await self._journal_between(message.thread, seen.offset, message.offset),
            message.agent_id,
            message.offset,
        )
        return await self.store.install(
            scope_of(message),
            seen,
            base=seen.base,
            upto=message.offset,
            tokens=seen.tokens + added.tokens,
            messages=seen.messages + added.messages,
            offset=message.offset,
        )

    async def _journal_between(self, thread: ThreadRef, after: int, up_to: int) -> list[Message]:
        """The thread's journal messages with `after < offset <= up_to`, oldest first."""
        if self.journal is None:
            raise NeedsNodeJournal("the thresholds processor needs the node's journal")
        return await messages_between(self.journal, thread, after=after, up_to=up_to)

    async def process(self, batch: Sequence[Record]) -> None:
        messages = await self.deleted.live_messages(batch)  # a deletion itself forgets the counters
        counted = list(zip(messages, await self.outcomes(messages), strict=True))
        decided = plan(counted, self.clock())
        if decided.held_back:
            await self._ledger().record_crossings(decided.held_back)
        await self.emit(decided.requests)

    async def emit(self, requests: Sequence[CompactionRequest]) -> None:
        """Record each decided request as its thread's compaction in flight, produce them and wait
        until the broker confirmed every one, then mark them sent (module doc)."""
        if not requests:
            return
        await self._ledger().record_requests([(r.scope, r.payload()) for r in requests])
        await self._publish([compaction_requested.encode(r) for r in requests])
        for request in requests:
            await self.store.mark_sent(request.scope, request.to_offset)
            log.info(
                "compaction requested for %s/%s/%s at offset %d",
                request.environment,
                request.account_id,
                request.thread_id,
                request.to_offset,
            )

    async def reevaluate(self, scope: ThreadScope) -> Outcome | None:
        """Count the thread's last journal message again, as if it had just arrived, and emit the
        request when that crosses a threshold (after the summary of a compaction that held a
        crossing back, the counters are stale and are rebuilt from the journal since it). The
        outcome, or None when the journal holds no message of the thread's agent."""
        if self.journal is None:
            raise NeedsNodeJournal("the thresholds processor needs the node's journal")
        thread = ThreadRef(
            environment=scope.environment, account_id=scope.account_id, thread_id=scope.thread_id
        )
        last = await self.journal.last(thread, 1)
        if not last or last[-1].agent_id != scope.agent_id:
            return None
        message = last[-1]
        outcome = await self.outcome(message)
        await self.emit(plan([(message, outcome)], self.clock()).requests)
        return outcome

    async def request_again(self, requests: Sequence[tuple[ThreadScope, Mapping[str, Any]]]) -> None:
        """Produce recorded `compaction.requested` values again (compactions in flight whose
        request may be lost), taking each thread's guard first when Redis lost it; returns once
        the broker confirmed every one."""
        if not requests:
            return
        for scope, payload in requests:
            await self.store.hold_guard(scope, int(payload["to_offset"]))
        await self._publish([compaction_requested.encode_recorded(s.thread_id, p) for s, p in requests])

    async def _publish(self, events: Sequence[EncodedEvent]) -> None:
        """Produce `events`; `RequestNotDelivered` (an outage, caused by the `RecordsNotConfirmed`)
        when the broker did not confirm every one."""
        await self.output.send([OutgoingRecord(e.key, e.value) for e in events], what="compaction requests")

    def _ledger(self) -> CompactionLedger:
        if self.ledger is None:
            raise NeedsNodeJournal("the thresholds processor needs the node's Postgres pool")
        return self.ledger
