"""The routes by which a node acts on a journal shard another node serves, behind the nodes' shared
admin token.

`POST /admin/v1/shards/thread-deletions` `{"environment", "account_id", "thread_id"}` deletes the
thread's messages in this node's writer of its shard and answers `{"messages", "up_to_seq",
"seqs"}` (`core.stores.deletions.JournalDeletion`); the rest of the deletion (the register, the
tombstone, the other stores) is the caller's (`memstream.sharding.owner_journal`: a user's erasure
reaching threads of every shard).

`POST /admin/v1/shards/full-history` `{"shard"}` makes sure the topic holds the shard's seqs from 1
(`JournalTopicGuard.ensure_full_history`: republished from seq 1 when its part of the topic may lack
early seqs) and answers `{"republished": bool}` (`memstream.sharding.full_history`: `rebuild
clickhouse` asked of another node).

A shard not served here is 503 `shard_not_local`.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict, Field

from core.config import Settings
from core.errors import ShardNotLocal
from core.ids import Id
from core.journal.models import ThreadRef
from core.stores.journal import ThreadJournal
from core.threads import journal_call
from memstream.api.routes.admin import admin_authorization
from streams.journal_shards import LocalShards


class ThreadOfShard(BaseModel):
    model_config = ConfigDict(extra="forbid")

    environment: str
    account_id: Id
    thread_id: Id


class ShardNumber(BaseModel):
    model_config = ConfigDict(extra="forbid")

    shard: int = Field(ge=0)


class FullHistoryAnswer(BaseModel):
    republished: bool
    """Whether the shard is being republished from seq 1 (its part of the topic lacked early seqs)."""


class DeletedInShard(BaseModel):
    messages: int
    up_to_seq: int
    seqs: list[tuple[int, int]]


def shard_journal_router(
    journal: ThreadJournal, shards: LocalShards, token: str, settings: Settings
) -> APIRouter:
    """The routes over the node's own shards: `journal` (`ShardedJournal`: never forwarded further)
    and `shards` (the node's list of local shards, which changes as shards move)."""
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

    @router.post("/full-history", response_model=FullHistoryAnswer)
    async def full_history(body: ShardNumber) -> Any:
        local = next((source for source in shards if source.shard == body.shard), None)
        if local is None:
            raise ShardNotLocal(body.shard, f"journal shard {body.shard} is not open on this node (it moved)")
        return FullHistoryAnswer(republished=await local.guard.ensure_full_history())

    return router
