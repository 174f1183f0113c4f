"""`OwnerJournal`: the node's journal for the API when its shards are spread over nodes: every call
goes to the local shard's journal (`core.sharding.journal.ShardedJournal`), and a thread deletion
whose shard another node serves is carried out by that node's writer.

The API's thread requests reach the owner of the thread's shard (`memstream.api.forwarding`), so
appends and reads are local there. A user's erasure (`core.user_erasure`) is not a thread request:
it deletes every thread of the user, wherever their shards live. Its journal step
(`ThreadJournal.delete_thread`, the only step that needs the writer: the others reach shared
stores) asks the owner `POST {owner}/admin/v1/shards/thread-deletions` with the nodes' shared
admin token (`memstream.api.routes.shard_journal`), which deletes the messages in its writer and
answers what it removed. No known owner, or an owner that does not answer, is `ShardNotLocal`
(503 with `Retry-After`): the erasure is finished by asking again (or by the node's start).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import httpx

from core.errors import ShardNotLocal
from core.journal.models import Message, NewMessage, ThreadRef
from core.sharding.journal import ShardedJournal
from core.stores.deletions import JournalDeletion
from memstream.api.forwarding import Owners, Remote
from sinks.slatedb.journal import SlateJournal

DELETIONS_PATH = "/admin/v1/shards/thread-deletions"


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
        return await self.journals.append(thread, agent_id, user_id, messages)

    async def last(self, thread: ThreadRef, n: int) -> list[Message]:
        return await self.journals.last(thread, n)

    async def after(self, thread: ThreadRef, offset: int, limit: int = 1000) -> list[Message]:
        return await self.journals.after(thread, offset, limit)

    async def delete_thread(self, thread: ThreadRef) -> JournalDeletion:
        try:
            return await self.journals.delete_thread(thread)
        except ShardNotLocal as here:
            placed = self.owners.thread(thread.environment, thread.account_id, thread.thread_id)
            if not isinstance(placed, Remote):
                raise
            return await self._delete_at(placed, thread, here)

    async def _delete_at(self, owner: Remote, thread: ThreadRef, here: ShardNotLocal) -> JournalDeletion:
        body = {
            "environment": thread.environment,
            "account_id": thread.account_id,
            "thread_id": thread.thread_id,
        }
        try:
            response = await self._http().post(owner.url + DELETIONS_PATH, json=body, headers=self._headers)
        except httpx.HTTPError as exc:
            raise ShardNotLocal(
                here.shard,
                f"thread {thread.thread_id} lives in journal shard {here.shard}, served by node "
                f"{owner.node_id!r} at {owner.url}, which did not answer ({type(exc).__name__}); retry",
            ) from exc
        if response.status_code != 200:
            raise ShardNotLocal(
                here.shard,
                f"thread {thread.thread_id} lives in journal shard {here.shard}; node {owner.node_id!r} at "
                f"{owner.url} could not delete its messages (HTTP {response.status_code}: "
                f"{response.text[:300]}); retry",
            )
        answer = response.json()
        return JournalDeletion(
            messages=int(answer["messages"]),
            up_to_seq=int(answer["up_to_seq"]),
            seqs=tuple((int(a), int(b)) for a, b in answer["seqs"]),
        )

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
