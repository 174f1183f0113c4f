"""`OwnerJournal`: the node's journal for the API when its shards are spread over nodes: every call
goes to the local shard's journal (`core.sharding.journal.ShardedJournal`), and a call naming a
thread whose shard another node serves is carried out by that node's writer.

The API's thread requests reach the owner of the thread's shard (`memstream.api.forwarding`), so
appends and reads are local there. A user's erasure (`core.user_erasure`) is not a thread request:
it deletes every thread of the user, wherever their shards live. Its journal step
(`ThreadJournal.delete_thread`, the only step that needs the writer: the others reach shared
stores) asks the owner `POST {owner}/admin/v1/shards/thread-deletions` with the nodes' shared
admin token (`memstream.api.routes.shard_journal`), which deletes the messages in its writer and
answers what it removed. No known owner, or an owner that does not answer, is `ShardNotLocal`
(503 with `Retry-After`): the erasure is finished by asking again (or by the node's start).

An account's export and import (`memstream.ops.account_export`) are not thread requests either:
they read (`after`, `last`) and append to threads of every shard. Those calls go to the owner's
`/admin/v1/shards/thread-messages[/after|/last]` (`memstream.api.routes.shard_messages`), so what
they read is the owner's writer's (an import's "what exists" is exact right after a write, unlike
a lagging read-only view). The owner's journal errors come back as the same typed errors (422
`InvalidInput` with its code and field, 409 `Conflict`, 404, 403); an owner unknown, silent, or
answering anything else (its shard moving: 503) is `ShardNotLocal`. An append whose answer was lost
may have been written: the same append again (same message ids) answers the stored messages.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import httpx

from core.errors import (
    Conflict,
    Forbidden,
    InvalidInput,
    MemstreamError,
    NotFound,
    ShardNotLocal,
    ThreadDeleted,
)
from core.inputs import InvalidEncoding, InvalidText, JsonTooDeep, NumberOutOfRange
from core.journal.models import Message, NewMessage, ThreadRef
from core.sharding.journal import ShardedJournal
from core.stores.deletions import JournalDeletion
from memstream.api.forwarding import Owners, Remote
from memstream.api.routes.shard_messages import (
    AFTER_PATH,
    APPEND_PATH,
    LAST_PATH,
    messages_of,
    thread_body,
)
from sinks.slatedb.journal import SlateJournal

DELETIONS_PATH = "/admin/v1/shards/thread-deletions"
_TYPED: tuple[type[MemstreamError], ...] = (
    InvalidInput,
    InvalidText,
    JsonTooDeep,
    NumberOutOfRange,
    InvalidEncoding,
    Conflict,
    NotFound,
    ThreadDeleted,
    Forbidden,
)
"""The errors of an owner that are the call's answer, not an outage: raised again as they are."""
_BY_CODE = {kind.code: kind for kind in _TYPED}
_BY_STATUS: dict[int, type[MemstreamError]] = {
    422: InvalidInput,
    409: Conflict,
    404: NotFound,
    403: Forbidden,
}


class OwnerJournal:
    """See the module doc. `admin_token` is the nodes' shared admin token."""

    def __init__(
        self,
        journals: ShardedJournal[SlateJournal],
        owners: Owners,
        admin_token: str,
        *,
        timeout_s: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.journals = journals
        self.owners = owners
        self._headers = {"Authorization": f"Bearer {admin_token}"}
        self._timeout = httpx.Timeout(timeout_s, connect=2.0)
        self._transport = transport
        self._client: httpx.AsyncClient | None = None

    @property
    def shards(self) -> int:
        return self.journals.shards

    def shard_of(self, thread: ThreadRef) -> int:
        return self.journals.shard_of(thread)

    async def append(
        self, thread: ThreadRef, agent_id: str, user_id: str | None, messages: Sequence[NewMessage]
    ) -> list[Message]:
        try:
            return await self.journals.append(thread, agent_id, user_id, messages)
        except ShardNotLocal as here:
            body = {
                **thread_body(thread),
                "agent_id": agent_id,
                "user_id": user_id,
                "messages": [m.model_dump(mode="json", exclude_none=True) for m in messages],
            }
            return await self._messages_at(thread, here, APPEND_PATH, body)

    async def last(self, thread: ThreadRef, n: int) -> list[Message]:
        try:
            return await self.journals.last(thread, n)
        except ShardNotLocal as here:
            return await self._messages_at(thread, here, LAST_PATH, {**thread_body(thread), "n": n})

    async def after(self, thread: ThreadRef, offset: int, limit: int = 1000) -> list[Message]:
        try:
            return await self.journals.after(thread, offset, limit)
        except ShardNotLocal as here:
            body = {**thread_body(thread), "offset": offset, "limit": limit}
            return await self._messages_at(thread, here, AFTER_PATH, body)

    async def _messages_at(
        self, thread: ThreadRef, here: ShardNotLocal, path: str, body: dict[str, Any]
    ) -> list[Message]:
        """The messages the owner of `thread`'s shard answers at `path` (module doc)."""
        response, where = await self._post_to_owner(thread, here, path, body)
        if response.status_code == 200:
            return messages_of(response.content, where)
        raise owner_error(response, thread, here.shard, where)

    async def delete_thread(self, thread: ThreadRef) -> JournalDeletion:
        try:
            return await self.journals.delete_thread(thread)
        except ShardNotLocal as here:
            response, where = await self._post_to_owner(thread, here, DELETIONS_PATH, thread_body(thread))
            if response.status_code != 200:
                raise ShardNotLocal(
                    here.shard,
                    f"thread {thread.thread_id} lives in journal shard {here.shard}; {where} could not "
                    f"delete its messages (HTTP {response.status_code}: {response.text[:300]}); retry",
                ) from None
            answer = response.json()
            return JournalDeletion(
                messages=int(answer["messages"]),
                up_to_seq=int(answer["up_to_seq"]),
                seqs=tuple((int(a), int(b)) for a, b in answer["seqs"]),
            )

    async def _post_to_owner(
        self, thread: ThreadRef, here: ShardNotLocal, path: str, body: dict[str, Any]
    ) -> tuple[httpx.Response, str]:
        """The answer of the owner of `thread`'s shard to `body` at `path`, and who it is (for
        messages); `here` again when no owner is known, `ShardNotLocal` when it does not answer."""
        placed = self.owners.thread(thread.environment, thread.account_id, thread.thread_id)
        if not isinstance(placed, Remote):
            raise here
        where = f"node {placed.node_id!r} at {placed.url}"
        try:
            response = await self._http().post(placed.url + path, json=body, headers=self._headers)
        except httpx.HTTPError as exc:
            raise ShardNotLocal(
                here.shard,
                f"thread {thread.thread_id} lives in journal shard {here.shard}, served by {where}, which "
                f"did not answer ({type(exc).__name__}); retry",
            ) from exc
        return response, where

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(
                timeout=self._timeout, trust_env=False, follow_redirects=False, transport=self._transport
            )
        return self._client

    def add_append_listener(self, listener: Callable[[], None]) -> None:
        self.journals.add_append_listener(listener)

    async def ready(self) -> None:
        await self.journals.ready()

    async def close(self) -> None:
        """Close the HTTP client (the journals belong to the node)."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None


def owner_error(response: httpx.Response, thread: ThreadRef, shard: int, where: str) -> MemstreamError:
    """The error of an owner's answer other than 200: an error of the call (422, 409, 404, 403) as it
    is (its class by status, or the more specific one of `_TYPED` its code names; code, message and
    field kept), anything else `ShardNotLocal` (retry)."""
    error: dict[str, Any] = {}
    try:
        decoded = response.json()
        if isinstance(decoded, dict) and isinstance(decoded.get("error"), dict):
            error = decoded["error"]
    except ValueError:
        pass
    code, message = str(error.get("code", "")), str(error.get("message", ""))
    by_status = _BY_STATUS.get(response.status_code)
    kind = _BY_CODE.get(code)
    if kind is None or by_status is None or not issubclass(kind, by_status):
        kind = by_status  # the status decides the class; the code stays the owner's
    if kind is None or not message:
        return ShardNotLocal(
            shard,
            f"thread {thread.thread_id} lives in journal shard {shard}; {where} could not serve the call "
            f"(HTTP {response.status_code}: {response.text[:300]}); retry",
        )
    if issubclass(kind, InvalidInput):
        field = error.get("field")
        typed: MemstreamError = kind(message, field=field if isinstance(field, str) else None)
    else:
        typed = kind(message)
    typed.code = code or kind.code
    return typed
