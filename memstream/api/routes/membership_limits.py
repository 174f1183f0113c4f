"""The operator commands a node taking part in the shard membership refuses (`MEMSTREAM_MEMBERSHIP`):
those that read or write every journal shard through the node's own writers, which hold only its
share of the shards - `verify` and `rebuild` (also the projections of the node hosting them).
Each answers 409 `conflict` saying so and what to do. The router is included before the admin
router, so its routes come first.

What works across nodes: `republish` (every shard: the others' by their owners,
`memstream.api.routes.admin_republish`), `replay`, the processors' pause and resume, a thread's
deletion (forwarded to its owner), a user's erasure (each thread's messages deleted by its shard's
owner: `memstream.sharding.owner_journal`) and an account's `export` and `import` (each thread's
messages read and appended by its shard's owner, the same).
"""

from __future__ import annotations

from typing import NoReturn

from fastapi import APIRouter, Depends

from core.config import Settings
from core.errors import Conflict
from memstream.api.routes.admin import admin_authorization

WHAT_TO_DO = (
    "it reads every journal shard, and this node serves only its share of them (shard membership is "
    "on). Not supported across nodes yet: stop every node, start one with MEMSTREAM_MEMBERSHIP=false "
    "over the same deployment (it opens every shard), run the command there, then start the nodes again"
)


def membership_limits_router(token: str, settings: Settings) -> APIRouter:
    router = APIRouter(
        prefix="/admin/v1",
        tags=["admin"],
        dependencies=[Depends(admin_authorization(token, settings))],
        include_in_schema=False,
    )

    def refuse(command: str) -> NoReturn:
        raise Conflict(f"`memstream {command}` is refused on this node: {WHAT_TO_DO}.")

    @router.get("/verify")
    async def verify() -> None:
        refuse("verify")

    @router.post("/rebuild/{target}")
    async def rebuild(target: str) -> None:
        refuse(f"rebuild {target}")

    return router
