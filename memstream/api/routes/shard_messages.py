"""The routes by which a node reads and appends a thread's messages in the journal shard another node
serves (`memstream.sharding.owner_journal`: an account's export and import reach threads of every
shard), behind the nodes' shared admin token, next to `POST /admin/v1/shards/thread-deletions`
(`memstream.api.routes.shard_journal`).

- `POST /admin/v1/shards/thread-messages` `{"environment", "account_id", "thread_id", "agent_id",
  "user_id", "messages": [<message as POST /v1/threads/{id}/messages takes it>]}` appends in this
  node's writer of the thread's shard (durable when answered; the journal's message-id retry rules
  apply, so the same call again is answered with the stored messages);
- `POST /admin/v1/shards/thread-messages/after` `{..thread.., "offset", "limit"}` and
  `POST /admin/v1/shards/thread-messages/last` `{..thread.., "n"}` read the thread.

Each answers the messages, oldest first, as NDJSON: one line per message, the value of its
`journal.messages` record (`streams.codecs.journal_messages`: every field, `created_at`, the tool
call, `seq` and `shard` included). Errors have the API's shape and status: the journal's own (422
for bad input, 409 for a message id reused with other content) as the journal raised them; ids
checked again here (422 naming the field); an environment other than this node's is 403; a shard
not served here is 503 `shard_not_local` with `Retry-After`.
"""

from __future__ import annotations

from collections.abc import Sequence

from fastapi import APIRouter, Depends, Response
from pydantic import BaseModel, ConfigDict

from core.config import Settings
from core.errors import Forbidden, JournalUnavailable
from core.ids import Id
from core.journal.models import Message, NewMessage, ThreadRef
from core.stores.journal import ThreadJournal
from core.threads import journal_call
from memstream.api.routes.admin import admin_authorization
from streams.codecs.errors import InvalidEvent
from streams.codecs.journal_messages import decode, encode

PREFIX = "/admin/v1/shards"
APPEND_PATH = PREFIX + "/thread-messages"
AFTER_PATH = PREFIX + "/thread-messages/after"
LAST_PATH = PREFIX + "/thread-messages/last"
NDJSON = "application/x-ndjson"


class ThreadOfShard(BaseModel):
    model_config = ConfigDict(extra="forbid")

    environment: str
    account_id: Id
    thread_id: Id

    def ref(self) -> ThreadRef:
        return ThreadRef(environment=self.environment, account_id=self.account_id, thread_id=self.thread_id)


class AppendInShard(ThreadOfShard):
    agent_id: Id
    user_id: Id | None = None
    messages: list[NewMessage]


class AfterInShard(ThreadOfShard):
    offset: int
    limit: int = 1000


class LastInShard(ThreadOfShard):
    n: int


def thread_body(thread: ThreadRef) -> dict[str, str]:
    """The thread's part of every request body."""
    return {"environment": thread.environment, "account_id": thread.account_id, "thread_id": thread.thread_id}


def messages_body(messages: Sequence[Message]) -> bytes:
    """The NDJSON answer of the routes (module doc)."""
    return b"".join(encode(message).value + b"\n" for message in messages)


def messages_of(body: bytes, source: str) -> list[Message]:
    """The messages of an answer (`messages_body`); JournalUnavailable naming `source` when a line is
    not a message record (a node of another version, a cut answer)."""
    try:
        return [decode(line) for line in body.split(b"\n") if line]
    except InvalidEvent as exc:
        raise JournalUnavailable(f"{source} answered messages this node cannot read: {exc}") from exc


def shard_messages_router(journal: ThreadJournal, token: str, settings: Settings) -> APIRouter:
    """The routes over the node's own shards' journal (`ShardedJournal`: never forwarded further)."""
    router = APIRouter(
        prefix=PREFIX,
        tags=["admin"],
        dependencies=[Depends(admin_authorization(token, settings))],
        include_in_schema=False,
    )

    def ref(body: ThreadOfShard) -> ThreadRef:
        if body.environment != settings.environment:
            raise Forbidden(
                f"this node serves environment {settings.environment!r}, not {body.environment!r}: "
                "ask a node of that environment"
            )
        return body.ref()

    def answer(messages: Sequence[Message]) -> Response:
        return Response(messages_body(messages), media_type=NDJSON)

    @router.post("/thread-messages")
    async def append_in_shard(body: AppendInShard) -> Response:
        call = journal.append(ref(body), body.agent_id, body.user_id, body.messages)
        return answer(await journal_call(call, "appending messages"))

    @router.post("/thread-messages/after")
    async def after_in_shard(body: AfterInShard) -> Response:
        call = journal.after(ref(body), body.offset, body.limit)
        return answer(await journal_call(call, "reading a thread"))

    @router.post("/thread-messages/last")
    async def last_in_shard(body: LastInShard) -> Response:
        return answer(await journal_call(journal.last(ref(body), body.n), "reading a thread"))

    return router
