"""The route by which a node deletes a thread's messages in the journal shard another node serves
(`memstream.sharding.owner_journal`: a user's erasure reaching threads of every shard), behind the
nodes' shared admin token.

`POST /admin/v1/shards/thread-deletions` `{"environment", "account_id", "thread_id"}` deletes the
thread's messages in this node's writer of its shard and answers `{"messages", "up_to_seq",
"seqs"}` (`core.stores.deletions.JournalDeletion`); the rest of the deletion (the register, the
tombstone, the other stores) is the caller's. A shard not served here is 503 `shard_not_local`.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict

from core.config import Settings
from core.ids import Id
from core.journal.models import ThreadRef
from core.stores.journal import ThreadJournal
from core.threads import journal_call
from memstream.api.routes.admin import admin_authorization


class ThreadOfShard(BaseModel):
    model_config = ConfigDict(extra="forbid")

    environment: str
    account_id: Id
    thread_id: Id


class DeletedInShard(BaseModel):
    messages: int
    up_to_seq: int
    seqs: list[tuple[int, int]]


def shard_journal_router(journal: ThreadJournal, token: str, settings: Settings) -> APIRouter:
    """The route over the node's own shards' journal (`ShardedJournal`: never forwarded further)."""
    router = APIRouter(
        prefix="/admin/v1/shards",
        tags=["admin"],
        dependencies=[Depends(admin_authorization(token, settings))],
        include_in_schema=False,
    )

    @router.post("/thread-deletions", response_model=DeletedInShard)
    async def delete_in_shard(body: ThreadOfShard) -> Any:
        ref = ThreadRef(environment=body.environment, account_id=body.account_id, thread_id=body.thread_id)
        deleted = await journal_call(journal.delete_thread(ref), "deleting a thread")
        return DeletedInShard(messages=deleted.messages, up_to_seq=deleted.up_to_seq, seqs=list(deleted.seqs))

    return router
