"""`flush`: the pre-compaction flush. Before a thread is summarized, durable facts stated in the
messages about to be compressed are saved to agent memory.

Input: `compaction.requested`. Output: `compaction.flushed` (key thread_id; `flushed`).

Per request:

1. Only when the agent has the Memory capability bound (`AgentService.has_memory`): read the
   request's messages (`from_offset`..`to_offset` of the thread, this agent's only) from the
   journal, make ONE `ChatModel.extract_facts` call on them, and store every fact through
   `MemoryService.store`, agent memory's normal write path (screening, capacity, same-key rules),
   with provenance `Provenance(thread_id, fact.message_ids)`. Without Memory bound nothing is
   read, the model is not called and nothing is stored (status `skipped_no_memory`).
2. Scope of a fact: the request's (environment, account, agent) and the user of the messages it
   came from (the request's `user_id` when they carry none), `scope_visibility="private"` when
   there is such a user, else `"shared"`. A fact whose messages belong to several users has no
   single owner: it is rejected (never stored visible to the wrong user). A `user_profile` fact
   needs its user: from a thread without a user the write path refuses it (`ProfileWithoutUser`,
   counted in `facts_rejected`), so "my name is ..." in a user-less thread never becomes a shared
   fact pinned for every user; its other facts (project facts...) are stored shared.
3. Best-effort: a fact the write path refuses (`InvalidInput` and its subclasses: screening,
   capacity, content length ...) is counted in `facts_rejected` and the others are still stored.
   Any other failure (model error, timeout or invalid output; a Postgres or journal error) is
   logged, ends this request's flush with status `failed` and its `error`, and the thread moves on.
4. ALWAYS, then: `compaction.flushed` is produced (the request's fields plus `flush`: status,
   facts_stored, facts_rejected, error when failed), and `process` returns only once the broker
   confirmed every record of the batch (idempotent producer), so offsets are committed after the
   flush records are durable. An unconfirmed record (`FlushNotDelivered`, an outage) fails the
   batch, which is retried. While the runtime stops (`stopping`), a wait on the broker is given up
   at once: the batch is not committed and is flushed again by the next run.

Idempotent under redelivery and replay: flushing the same request again extracts the same facts
and stores them again, which is a same-key, same-content no-op by `MemoryService.store`'s rules
(outcome `unchanged`: nothing written, no outbox row); `facts_stored` counts facts the write path
accepted, whether created, replaced or unchanged. A request that is not a valid
`compaction.requested` value is dead-lettered (InvalidMessage) before anything of its batch is
done.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from core.chat.base import ChatModel, ExtractedFact, FactsDraft
from core.config import Settings
from core.errors import InvalidInput
from core.journal.models import Message
from core.journal.reading import messages_between
from core.memory.agents import AgentRef, AgentService
from core.memory.models import MemoryScope, Provenance
from core.memory.service import MemoryService
from core.stores.journal import ThreadJournal
from processors.errors import NeedsNode
from streams.codecs import compaction_flushed, compaction_requested
from streams.codecs.compaction_flushed import CompactionFlushed, FlushOutcome, FlushStatus
from streams.codecs.compaction_requested import CompactionRequest
from streams.output import TopicOutput
from streams.producer import BatchPublisher, OutgoingRecord
from streams.runtime.errors import SinkUnavailable
from streams.runtime.processor import Processor, Record, decoding
from streams.topics import topic_name

NAME = "flush"
SOURCE_TOPIC = "compaction.requested"
OUTPUT_TOPIC = "compaction.flushed"

MODEL_TIMEOUT_S = 120.0
"""The extraction call is abandoned (status `failed`) after this long, whatever the provider's own
timeouts and retries."""
ERROR_MAX_CHARS = 1000

log = logging.getLogger("memstream.flush")


class FlushNotDelivered(SinkUnavailable):
    """The broker did not confirm a `compaction.flushed` record: the batch is retried (an outage)."""

    code = "compaction_flushed_not_delivered"


@dataclass(frozen=True, slots=True)
class FlushResult:
    """What one request's flush did (the `flush` object of `compaction.flushed`)."""

    status: FlushStatus
    facts_stored: int = 0
    facts_rejected: int = 0
    error: str | None = None

    def outcome(self) -> FlushOutcome:
        return FlushOutcome(
            status=self.status,
            facts_stored=self.facts_stored,
            facts_rejected=self.facts_rejected,
            error=self.error,
        )


def flushed(request: CompactionRequest, result: FlushResult) -> CompactionFlushed:
    """The `compaction.flushed` value for `request`: its fields, unknown ones too, plus `flush`."""
    return CompactionFlushed.of(request, result.outcome())


def fact_owner(fact: ExtractedFact, messages: Sequence[Message], default: str | None) -> str | None:
    """The user a fact belongs to: the one user of its source messages, else `default`.
    InvalidInput when its messages belong to several users."""
    ids = set(fact.message_ids)
    users = {m.user_id for m in messages if m.message_id in ids and m.user_id is not None}
    if len(users) > 1:
        raise InvalidInput(
            f"fact {fact.key!r} comes from messages of several users ({', '.join(sorted(users))})",
            field="message_ids",
        )
    return users.pop() if users else default


@dataclass(frozen=True, slots=True)
class FactWrite:
    """One fact as agent memory's write path takes it (`MemoryService.store`)."""

    scope: MemoryScope
    key: str
    content: str
    category: str
    visibility: Literal["private", "shared"]
    importance: float
    source: Provenance


@dataclass(frozen=True, slots=True)
class FactRejected:
    """A fact that cannot be stored whatever memory holds (its messages belong to several users)."""

    key: str
    error: InvalidInput


def facts_to_store(
    request: CompactionRequest, messages: Sequence[Message], draft: FactsDraft
) -> list[FactWrite | FactRejected]:
    """What to store for each fact of `draft`, in order (module doc, step 2): the scope of the
    request's agent and the fact's user (`fact_owner`, the request's `user_id` by default),
    private with a user and shared without, the provenance of its messages."""
    out: list[FactWrite | FactRejected] = []
    for fact in draft.facts:
        try:
            user = fact_owner(fact, messages, request.user_id)
        except InvalidInput as exc:
            out.append(FactRejected(fact.key, exc))
            continue
        scope = MemoryScope(
            environment=request.environment,
            account_id=request.account_id,
            agent_id=request.agent_id,
            user_id=user,
        )
        out.append(
            FactWrite(
                scope=scope,
                key=fact.key,
                content=fact.content,
                category=fact.category,
                visibility="private" if user is not None else "shared",
                importance=fact.importance,
                source=Provenance(thread_id=request.thread_id, message_ids=fact.message_ids),
            )
        )
    return out


def _short(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= ERROR_MAX_CHARS else text[: ERROR_MAX_CHARS - 1] + "…"


class Flush(Processor):
    """The `flush` processor (module doc). `journal`, `memory` and `agents` are the node's (agent
    memory over its Postgres pool); the chat model is `chat_model` or, when None,
    `open_chat_model()` called in `start`; `publisher` (to compaction.flushed) is built in `start`
    when not given. Construction does no I/O; `start` refuses (NeedsNode) without the journal or
    agent memory."""

    def __init__(
        self,
        settings: Settings,
        journal: ThreadJournal | None,
        memory: MemoryService | None,
        agents: AgentService | None,
        chat_model: ChatModel | None = None,
        *,
        open_chat_model: Callable[[], ChatModel] | None = None,
        name: str = NAME,
        publisher: BatchPublisher | None = None,
        model_timeout_s: float = MODEL_TIMEOUT_S,
    ) -> None:
        self.name = name
        self.source_topics = (SOURCE_TOPIC,)
        self.settings = settings
        self.journal = journal
        self.memory = memory
        self.agents = agents
        self.chat_model = chat_model
        self._open_chat_model = open_chat_model
        self.output = TopicOutput(
            settings,
            topic_name(settings, OUTPUT_TOPIC),
            client_id=f"memstream.{name}",
            logger=log,
            not_confirmed=FlushNotDelivered,
            publisher=publisher,
        )
        self.model_timeout_s = model_timeout_s

    async def start(self) -> None:
        if self.journal is None or self.agents is None or self.memory is None:
            raise NeedsNode(
                "the flush processor reads the journal and writes agent memory through the node's "
                "journal and Postgres pool: it runs inside the node (`memstream up` / `memstream node`), "
                "not as a separate worker"
            )
        if self.chat_model is None:
            if self._open_chat_model is None:
                raise ValueError("the flush processor needs `chat_model` or `open_chat_model`")
            self.chat_model = self._open_chat_model()
        self.output.start()

    def stopping(self) -> None:
        self.output.stopping(f"the {self.name} processor is stopping")

    async def stop(self) -> None:
        self.output.close()

    async def process(self, batch: Sequence[Record]) -> None:
        requests = []
        for record in batch:  # all-or-nothing before any effect
            with decoding(record):
                requests.append(compaction_requested.decode(record.value))
        if not requests:
            return
        out: list[OutgoingRecord] = []
        for request in requests:
            event = compaction_flushed.encode(flushed(request, await self.flush(request)))
            out.append(OutgoingRecord(event.key, event.value))
        await self.output.send(out, what="compaction.flushed records")

    async def flush(self, request: CompactionRequest) -> FlushResult:
        """Flush one request (module doc, steps 1-3). Never raises but for cancellation."""
        where = f"{request.environment}/{request.account_id}/{request.agent_id}/{request.thread_id}"
        try:
            result = await self._flush(request)
        except Exception as exc:  # best-effort: the thread moves on to summarization
            log.warning(
                "flush of %s (offsets %d..%d) failed: %s",
                where,
                request.from_offset,
                request.to_offset,
                _short(exc),
            )
            return FlushResult("failed", error=_short(exc))
        log.info(
            "flush of %s (offsets %d..%d): %s, %d facts stored, %d rejected",
            where,
            request.from_offset,
            request.to_offset,
            result.status,
            result.facts_stored,
            result.facts_rejected,
        )
        return result

    async def _flush(self, request: CompactionRequest) -> FlushResult:
        if self.agents is None or self.memory is None or self.chat_model is None:
            raise RuntimeError("the flush processor was not started")
        agent = AgentRef(
            environment=request.environment, account_id=request.account_id, agent_id=request.agent_id
        )
        if not await self.agents.has_memory(agent):
            return FlushResult("skipped_no_memory")
        messages = await self.messages(request)
        if not messages:
            return FlushResult("stored")
        async with asyncio.timeout(self.model_timeout_s):
            draft = await self.chat_model.extract_facts(messages)
        stored = rejected = 0
        for write in facts_to_store(request, messages, draft):
            try:
                if isinstance(write, FactRejected):
                    raise write.error
                await self.memory.store(
                    write.scope,
                    write.key,
                    write.content,
                    write.category,
                    scope_visibility=write.visibility,
                    importance=write.importance,
                    source=write.source,
                )
            except InvalidInput as exc:
                rejected += 1
                log.info("flush of %s: fact %r rejected: %s", request.thread_id, write.key, _short(exc))
            except Exception as exc:
                return FlushResult("failed", stored, rejected, _short(exc))
            else:
                stored += 1
        return FlushResult("stored", stored, rejected)

    async def messages(self, request: CompactionRequest) -> list[Message]:
        """The agent's messages of the thread with offsets `from_offset`..`to_offset`, in order."""
        if self.journal is None:
            raise NeedsNode("the flush processor needs the node's journal")
        return await messages_between(
            self.journal,
            request.thread,
            after=request.from_offset - 1,
            up_to=request.to_offset,
            agent_id=request.agent_id,
        )
