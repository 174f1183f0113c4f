"""`POST /admin/v1/republish` `{"from_seq", "shard"?}`: publish the journal again from a seq
(`memstream.ops.republish`), NDJSON progress; mounted by `memstream.api.routes.admin.admin_router`.

A node serving every shard (membership off) republishes its own shards (`shards_to_republish`,
`republish_shards`). A node taking part in the shard membership (`MEMSTREAM_MEMBERSHIP`, given an
`OwnerRepublish`) covers every shard wherever it lives:
- `shard` K (or the only shard): republished here when this node serves it (from_seq checked
  against it before streaming), else by its owner (`memstream.api.owner_republish`: the owner's
  refusal answers the same error, its progress is relayed, its report is the result). No known
  owner (a node is taking it over, or it is still opening here) or an owner that does not answer
  is 503 `shard_not_local` with `Retry-After`, naming the shard: retry.
- `from_seq` 0 or 1 without a shard: every shard from its start, one after the other in shard
  order, each where it lives at its turn (placed then, not at the start: a shard that moved
  meanwhile is republished by its new owner, once); an empty shard is left out of the report.
  A shard that cannot be placed ends the command with that error, naming the shards done before.
- A shard moving while it is republished ends the command with `shard_moved`
  (`memstream.ops.republish.RepublishMoved`: the rewind moved with the shard's journal and its new
  owner's relay publishes the rest, once); on an owner, its `shard_moved` line is relayed.
A request a node sends to an owner carries `X-Memstream-Forwarded-By`; a node receiving one for a
shard it does not serve (it moved since the sender's view) answers 503 rather than pass it on.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Annotated, Any

from fastapi import APIRouter, Header
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field
from starlette.background import BackgroundTask

from core.errors import InvalidInput, MemstreamError, ShardNotLocal
from memstream.api.forwarding import Remote
from memstream.api.owner_republish import OwnerRepublish
from memstream.ops.progress import Progress, ProgressCallback
from memstream.ops.republish import (
    RepublishReport,
    ShardsRepublished,
    check_from_seq,
    republish,
    republish_shards,
    shards_to_republish,
)
from streams.journal_shards import LocalShard, LocalShards

Stream = Callable[[str, Callable[[ProgressCallback], Any]], StreamingResponse]
"""`Exclusive.stream`: runs an exclusive NDJSON operation of a kind."""
KIND = "republish"


class RepublishRequest(BaseModel):
    from_seq: int = Field(description="first seq published again (inclusive; 0 or 1: the whole journal)")
    shard: int | None = Field(
        default=None,
        ge=0,
        description="the journal shard whose seqs `from_seq` counts; needed with several shards unless "
        "from_seq is 0 or 1 (every shard from its start)",
    )


class AcrossNodes:
    """The republish of a node in the shard membership (module doc). `shards` is the node's live
    list of local shards (the shard host adds and removes them)."""

    def __init__(self, shards: LocalShards, owners: OwnerRepublish) -> None:
        self.shards = shards
        self.owners = owners

    def local(self, shard: int) -> LocalShard | None:
        return next((local for local in self.shards if local.shard == shard), None)

    def moved(self, local: LocalShard) -> Callable[[], bool]:
        return lambda: all(other is not local for other in self.shards)

    async def here(self, local: LocalShard, from_seq: int, progress: ProgressCallback) -> RepublishReport:
        report = await republish(
            local.journal, local.relay, from_seq, progress=progress, moved=self.moved(local)
        )
        return replace(report, shard=local.shard)

    def owner(self, shard: int, forwarded_by: str | None) -> Remote:
        """The owner of `shard`, which this node does not serve; ShardNotLocal when none is known."""
        if forwarded_by is not None:
            raise ShardNotLocal(
                shard,
                f"node {forwarded_by!r} asked this node ({self.owners.node_id!r}) to republish journal shard "
                f"{shard}, which it does not serve now (the shard is moving between nodes): nothing was "
                "republished; retry in a few seconds",
            )
        placed = self.owners.owners.shard(shard)
        if isinstance(placed, Remote):
            return placed
        raise ShardNotLocal(
            shard,
            f"no node serves journal shard {shard} right now (a node is taking it over, or it is still "
            "opening): nothing was republished; retry in a few seconds",
        )

    async def every_shard(
        self, from_seq: int, progress: ProgressCallback
    ) -> RepublishReport | ShardsRepublished:
        """Every shard from its start, each where it lives at its turn (module doc)."""
        started, reports = time.monotonic(), list[RepublishReport]()
        try:
            for shard in range(self.owners.shards):

                def prefixed(step: Progress, shard: int = shard) -> None:
                    progress(
                        step
                        if step.detail.startswith("shard ")
                        else replace(step, detail=f"shard {shard}: {step.detail}")
                    )

                local = self.local(shard)
                if local is not None:
                    if await local.journal.last_seq() > 0:  # an empty shard has nothing to republish
                        reports.append(await self.here(local, from_seq, prefixed))
                    continue
                opened = await self.owners.start(self.owner(shard, None), shard, 0)  # 0: empty answers 0..0
                report = await opened.follow(prefixed)
                if report.last_seq > 0:
                    reports.append(report)
        except MemstreamError as exc:
            if reports:
                done = ", ".join(str(r.shard) for r in reports)
                exc.message += (
                    f" (republished before this: shard {done}; republish the others with --shard K)"
                )
                exc.args = (exc.message,)
            raise
        if not reports:
            check_from_seq(from_seq, 0)  # "the journal is empty" for 1; 0 republishes nothing
        if len(reports) == 1:
            return reports[0]
        return ShardsRepublished(shards=tuple(reports), seconds=round(time.monotonic() - started, 3))


def add_republish_route(
    router: APIRouter,
    shards: LocalShards,
    owners: OwnerRepublish | None,
    stream: Stream,
    check: Callable[[str], None],
) -> None:
    """Add the route of the module doc to the admin `router`; `stream(kind, operation)` runs an
    exclusive NDJSON operation and `check(kind)` raises its 409 now when one runs (`Exclusive`)."""

    @router.post("/republish", summary="Publish the journal again from a seq (NDJSON progress)")
    async def republish_route(
        request: RepublishRequest,
        forwarded_by: Annotated[
            str | None, Header(alias="X-Memstream-Forwarded-By", include_in_schema=False)
        ] = None,
    ) -> StreamingResponse:
        if owners is None:
            chosen = await shards_to_republish(shards, request.from_seq, request.shard)

            async def operation(progress: ProgressCallback) -> Any:
                return await republish_shards(chosen, request.from_seq, progress=progress)

            return stream(KIND, operation)
        return await _across_nodes(AcrossNodes(shards, owners), request, forwarded_by, stream, check)


async def _across_nodes(
    across: AcrossNodes,
    request: RepublishRequest,
    forwarded_by: str | None,
    stream: Stream,
    check: Callable[[str], None],
) -> StreamingResponse:
    count, from_seq = across.owners.shards, request.from_seq
    if request.shard is not None and request.shard >= count:
        raise InvalidInput(
            f"--shard {request.shard} is not a journal shard: the journal has {count} shard(s), "
            f"0..{count - 1}",
            field="shard",
        )
    if request.shard is None and count > 1:
        if from_seq > 1:
            raise InvalidInput(
                f"the journal has {count} shards, each numbering its own seqs: add --shard K "
                f"(0..{count - 1}) to republish one from seq {from_seq}, or use --from-seq 0 to "
                "republish every shard from its start",
                field="shard",
            )
        check_from_seq(from_seq, max(from_seq, 0))  # a negative from_seq
        return stream(KIND, lambda progress: across.every_shard(from_seq, progress))
    shard = request.shard or 0
    local = across.local(shard)
    if local is not None:
        check_from_seq(from_seq, await local.journal.last_seq())
        return stream(KIND, lambda progress: across.here(local, from_seq, progress))
    owner = across.owner(shard, forwarded_by)
    check(KIND)  # before the owner starts: a refusal here must not leave it running
    opened = await across.owners.start(owner, shard, from_seq)
    try:
        response = stream(KIND, opened.follow)
    except BaseException:
        await opened.aclose()
        raise
    response.background = BackgroundTask(opened.aclose)  # a body that never started still closes it
    return response
