"""`/admin/v1`: operator commands run inside the node (it owns the journal, chdb and Qdrant Edge).

Every route needs `Authorization: Bearer <admin token>` (`settings.admin_token`, else the token the
node generated in `{data_dir}/admin.token`; see `memstream.ops.admin_token`). API keys do not work
here, and the admin token does not work on `/v1`.

Long operations answer `application/x-ndjson`: one JSON object per line, `{"progress": {...}}`
(`memstream.ops.progress.Progress.as_json()`) as they go, then exactly one `{"result": {...}}` or
`{"error": {"code", "message"}}` line; while an operation is quiet, an empty line every
`HEARTBEAT_S` tells the client the node is still there. Input that is invalid from the start
(unknown processor, a `from_seq` past the journal, a malformed `from`) is refused before streaming
with the usual JSON error and status. If the client goes away, the operation is cancelled. One
operation of each kind runs at a time (another answers 409): the kind is taken when the response
body starts and released when it ends, so a client that disconnects before the body starts
holds nothing.

- `GET  /admin/v1/processors`: the node's processors, their consumer group, topics and state.
- `GET  /admin/v1/processors/{name}/lag`: committed vs end offset per partition of its group.
- `POST /admin/v1/replay`: reset a processor's group (`memstream.ops.replay_run`); NDJSON.
- `POST /admin/v1/republish`: publish the journal again from a seq (of one journal shard, or every
  shard from its start, wherever it lives: `memstream.api.routes.admin_republish`); NDJSON.
- `GET  /admin/v1/verify`: journal vs ClickHouse projection counts (`memstream.ops.verify`); NDJSON.
- `POST /admin/v1/rebuild/{clickhouse|qdrant}`: rebuild a projection and swap it in; NDJSON.
- `GET  /admin/v1/accounts/{id}/export`, `POST /admin/v1/accounts/{id}/import`: account export and
  import (`memstream.api.routes.admin_accounts`), when the node gives `AdminDeps.accounts`.
- `DELETE /admin/v1/accounts/{id}/users/{user_id}`: erase a user (`memstream.api.routes.admin_users`),
  when the node gives `AdminDeps.erasures`; NDJSON.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query
from fastapi.responses import StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, Field

from core.config import Settings
from core.errors import Conflict, MemstreamError, NotFound, Unauthorized
from core.sharding.journal import ShardedThreadJournal
from core.stores.deletions import DeletionRegister
from core.stores.message_vectors import MessageVectorStore
from core.stores.transcripts import TranscriptStore
from core.user_erasure import UserErasure
from memstream.api.owner_republish import OwnerRepublish
from memstream.api.routes.admin_accounts import add_account_routes
from memstream.api.routes.admin_republish import add_republish_route
from memstream.api.routes.admin_users import add_erasure_routes
from memstream.metrics import NodeFigures
from memstream.ops.account_export import AccountStores
from memstream.ops.progress import Progress, ProgressCallback
from memstream.ops.replay import GroupOffsets, PartitionLag, total_lag
from memstream.ops.replay_from import parse_replay_from
from memstream.ops.replay_run import processor_status, run_replay
from memstream.ops.verify import verify
from memstream.ops.verify_erasures import ErasureStores
from streams.journal_shards import LocalShards, ShardSources
from streams.runtime.supervisor import ProcessorSupervisor

log = logging.getLogger("memstream.admin")

Rebuilder = Callable[[ProgressCallback], Awaitable[Any]]
"""Runs one rebuild with a progress callback and returns its report (a dataclass)."""

HEARTBEAT_S = 10.0
"""Longest silence of an operation's stream: an empty line is sent after it (module doc)."""

_bearer = HTTPBearer(auto_error=False, scheme_name="AdminToken", description="The node's admin token.")


@dataclass
class AdminDeps:
    """What the admin routes act on; built by the node (see `memstream.node`)."""

    settings: Settings
    token: str
    journal: ShardedThreadJournal
    """Every thread's journal, for verify (`ShardedJournal`; `EveryShardJournal` across nodes)."""
    shards: LocalShards  # the journal shards of this node with their relays (republish)
    every_shard: Callable[[], ShardSources]  # for verify (`memstream.sharding.shard_sources`)
    processors: ProcessorSupervisor
    transcripts: Callable[[], TranscriptStore]
    rebuilders: Mapping[str, Rebuilder]
    replay_idle_timeout_s: float = 30.0
    forget_progress: Callable[[str], Awaitable[None]] | None = None
    """Deletes a consumer group's stored journal progress (a replay makes it process again)."""
    figures: NodeFigures | None = None
    """The figures read in the background for /metrics (`/admin/v1/overview` shows them)."""
    accounts: AccountStores | None = None
    """The stores of account export and import (`memstream.api.routes.admin_accounts`)."""
    deletions: DeletionRegister | None = None
    """The thread-deletion register (`memstream verify` checks the deletions)."""
    message_vectors: Callable[[], MessageVectorStore] | None = None
    """The message vectors (`memstream verify` checks that deletions left none)."""
    erasures: UserErasure | None = None
    """User erasures (`memstream erase-user`)."""
    erasure_stores: ErasureStores | None = None
    """What `memstream verify` reads to check the user erasures."""
    owner_republish: OwnerRepublish | None = None
    """With shards across nodes: the republish of the shards other nodes serve, by their owners
    (`memstream.api.routes.admin_republish`)."""


class ReplayRequest(BaseModel):
    processor: str = Field(min_length=1, max_length=128)
    from_: str = Field(
        alias="from", min_length=1, max_length=4000, description="earliest | P:O,... | ISO time"
    )
    coordinate: bool = False
    dry_run: bool = False


class ProcessorInfo(BaseModel):
    name: str
    group_id: str
    source_topics: list[str]
    state: str


class ProcessorOverview(BaseModel):
    name: str
    runs_in: Literal["node", "worker"] = Field(description="worker: another process (`memstream worker`)")
    state: str | None = Field(description="the node's processors only: running, paused, crashed, ...")
    lag: int | None = Field(description="records of its source topics not committed yet; null: not read")
    dead_letters: int | None = Field(description="records in its dead-letter topic; null: not read")


class Overview(BaseModel):
    processors: list[ProcessorOverview]
    relay_lag: int | None
    summaries_written: int | None
    compactions_in_flight: int | None
    figures_age_s: float | None = Field(
        description="how old lag, dead letters and totals are; null: not read yet"
    )


class LagInfo(BaseModel):
    topic: str
    partition: int
    committed: int | None
    end: int
    lag: int


class LagReport(BaseModel):
    processor: str
    group_id: str
    total_lag: int
    partitions: list[LagInfo]


def plain(value: Any) -> Any:
    """A dataclass report as JSON-ready data (datetimes as ISO strings; `ok`-like properties kept)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        data = {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
        for name in ("ok",):
            if isinstance(getattr(type(value), name, None), property):
                data[name] = getattr(value, name)
        return data
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def _line(kind: str, body: Any) -> bytes:
    return (json.dumps({kind: body}, default=str) + "\n").encode()


async def ndjson(
    operation: Callable[[ProgressCallback], Awaitable[Any]], *, heartbeat_s: float = HEARTBEAT_S
) -> AsyncIterator[bytes]:
    """Run `operation`, yielding its progress lines (an empty line after `heartbeat_s` of silence),
    then its result or error line (module doc)."""
    queue: asyncio.Queue[Progress] = asyncio.Queue()
    task = asyncio.ensure_future(operation(queue.put_nowait))
    try:
        while not (task.done() and queue.empty()):
            getter = asyncio.ensure_future(queue.get())
            done, _ = await asyncio.wait(
                {getter, task}, timeout=heartbeat_s, return_when=asyncio.FIRST_COMPLETED
            )
            if getter.done():
                yield _line("progress", getter.result().as_json())
                continue
            getter.cancel()
            if not done:
                yield b"\n"
        error = task.exception()
        if error is None:
            yield _line("result", plain(task.result()))
        elif isinstance(error, MemstreamError):
            yield _line("error", {"code": error.code, "message": error.message})
        else:
            log.error("admin operation failed", exc_info=error)
            yield _line("error", {"code": "internal_error", "message": f"{type(error).__name__}: {error}"})
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task


class Exclusive:
    """At most one operation of each kind at a time."""

    def __init__(self) -> None:
        self._busy: set[str] = set()

    def stream(self, kind: str, operation: Callable[[ProgressCallback], Awaitable[Any]]) -> StreamingResponse:
        """The NDJSON response running `operation`; 409 now if a `kind` runs (module doc)."""
        self.check(kind)
        return StreamingResponse(self.body(kind, operation), media_type="application/x-ndjson")

    async def body(
        self, kind: str, operation: Callable[[ProgressCallback], Awaitable[Any]]
    ) -> AsyncIterator[bytes]:
        """`ndjson(operation)` holding `kind` from its first step to its end (module doc). When
        another took `kind` since `stream` checked, the only line is a `conflict` error."""
        if kind in self._busy:
            yield _line("error", {"code": Conflict.code, "message": self._busy_message(kind)})
            return
        self._busy.add(kind)
        try:
            async for line in ndjson(operation):
                yield line
        finally:
            self._busy.discard(kind)

    def check(self, kind: str) -> None:
        """409 `conflict` now when an operation of `kind` runs."""
        if kind in self._busy:
            raise Conflict(self._busy_message(kind))

    @staticmethod
    def _busy_message(kind: str) -> str:
        return f"a {kind} is already running on this node: wait for it to finish"


def admin_authorization(token: str, settings: Settings) -> Callable[..., Awaitable[None]]:
    """The dependency of the routes that need the node's admin token (`Authorization: Bearer`)."""

    async def authorized(
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    ) -> None:
        given = credentials.credentials if credentials is not None else ""
        if not given or not secrets.compare_digest(given.encode(), token.encode()):
            raise Unauthorized(
                "the admin API needs `Authorization: Bearer <admin token>` (settings.admin_token, or the "
                f"token the node wrote to {settings.admin_token_path})"
            )

    return authorized


def admin_router(deps: AdminDeps) -> APIRouter:
    authorized = admin_authorization(deps.token, deps.settings)
    router = APIRouter(prefix="/admin/v1", tags=["admin"], dependencies=[Depends(authorized)])
    exclusive = Exclusive()

    def offsets() -> GroupOffsets:
        return GroupOffsets(deps.settings.broker_bootstrap)

    @router.get("/processors", response_model=list[ProcessorInfo], summary="The node's processors")
    async def processors() -> list[ProcessorInfo]:
        out = []
        for name in deps.processors.names():
            status = deps.processors.status(name)
            out.append(
                ProcessorInfo(
                    name=name,
                    group_id=status.group_id,
                    source_topics=list(status.source_topics),
                    state=status.state,
                )
            )
        return out

    @router.get("/overview", response_model=Overview, summary="Every processor with its lag and dead letters")
    async def overview() -> Overview:
        here = set(deps.processors.names())
        figures = deps.figures.figures if deps.figures is not None else None
        names = sorted(here | set(deps.figures.sources if deps.figures is not None else ()))
        return Overview(
            processors=[
                ProcessorOverview(
                    name=name,
                    runs_in="node" if name in here else "worker",
                    state=deps.processors.status(name).state if name in here else None,
                    lag=figures.lag.get(name) if figures is not None else None,
                    dead_letters=figures.dead_letters.get(name) if figures is not None else None,
                )
                for name in names
            ],
            relay_lag=figures.relay_lag if figures is not None else None,
            summaries_written=figures.summaries if figures is not None else None,
            compactions_in_flight=figures.in_flight if figures is not None else None,
            figures_age_s=deps.figures.age_s() if deps.figures is not None else None,
        )

    @router.get("/processors/{name}/lag", response_model=LagReport, summary="A processor's consumer lag")
    async def lag(name: str) -> LagReport:
        status = processor_status(deps.processors, name)
        if not status.source_topics:
            raise Conflict(f"processor {name} has not started yet in this node: retry in a few seconds")
        lags: list[PartitionLag] = await asyncio.to_thread(
            offsets().lag, status.group_id, list(status.source_topics)
        )
        return LagReport(
            processor=name,
            group_id=status.group_id,
            total_lag=total_lag(lags),
            partitions=[
                LagInfo(topic=x.topic, partition=x.partition, committed=x.committed, end=x.end, lag=x.lag)
                for x in lags
            ],
        )

    @router.post("/replay", summary="Reset a processor's consumer group (NDJSON progress)")
    async def replay(request: ReplayRequest) -> StreamingResponse:
        start = parse_replay_from(request.from_)
        processor_status(deps.processors, request.processor)

        async def operation(progress: ProgressCallback) -> Any:
            return await run_replay(
                offsets(),
                deps.processors,
                request.processor,
                start,
                coordinate=request.coordinate,
                dry_run=request.dry_run,
                idle_timeout_s=deps.replay_idle_timeout_s,
                progress=progress,
                forget_progress=deps.forget_progress,
            )

        return exclusive.stream(f"replay of {request.processor}", operation)

    @router.get("/verify", summary="Compare journal and ClickHouse projection counts (NDJSON progress)")
    async def verify_route(
        settle_s: Annotated[float, Query(ge=0, le=600, description="longest wait for lag to resolve")] = 10.0,
    ) -> StreamingResponse:
        async def operation(progress: ProgressCallback) -> Any:
            store = deps.transcripts()
            await store.ensure_schema()
            return await verify(
                deps.every_shard(),
                deps.journal,
                store,
                deps.settings.environment,
                settle_s=settle_s,
                progress=progress,
                deletions=deps.deletions,
                vectors=deps.message_vectors() if deps.message_vectors is not None else None,
                erasures=deps.erasure_stores,
            )

        return exclusive.stream("verify", operation)

    @router.post("/rebuild/{target}", summary="Rebuild a projection and swap it in (NDJSON progress)")
    async def rebuild(target: Literal["clickhouse", "qdrant"]) -> StreamingResponse:
        rebuilder = deps.rebuilders.get(target)
        if rebuilder is None:
            raise NotFound(f"no rebuild of {target!r} on this node (available: {', '.join(deps.rebuilders)})")
        return exclusive.stream(f"rebuild of {target}", rebuilder)

    add_republish_route(router, deps.shards, deps.owner_republish, exclusive.stream, exclusive.check)
    if deps.accounts is not None:
        add_account_routes(router, deps.accounts, deps.settings.environment, exclusive.stream)
    if deps.erasures is not None:
        add_erasure_routes(router, deps.erasures, deps.settings.environment, exclusive.stream)
    return router
