"""The node: one process hosting the HTTP API, the journal's single writer, the relays and the processors.

Start-up order: Postgres schema, topics (topics.yaml), the journal of every shard
(`MEMSTREAM_JOURNAL_SHARDS`, `core.sharding.shards`: shard 0 first, whose record of the shard count
refuses a start with another count; opening fences any previous writer), a relay per shard
(resuming from its durable cursor; when the broker's topic is not the one the
cursor was confirmed on - the memory-only embedded broker lost it, or another node's relay moved
the cursor - from the lowest progress of the journal's consumer groups, `streams.topic_sync`,
which also re-checks every few seconds), the agent-memory outbox relay, the
processors (sharing the process's single index and embedding model with recall: `Engines`; run
by a `ProcessorSupervisor`, so the admin API can pause and resume one, a crashed one is restarted
alone and `/readyz` reports it degraded: a processor never stops the node), the compaction recovery
(`processors.compaction_recovery`: requests lost with the broker are requested again), the daily
hygiene pass,
then the API (with the operator commands under `/admin/v1`, behind the admin token: configured, or
generated into `{data_dir}/admin.token`, and the MCP endpoint at `/mcp/{agent_id}`). The
components are built by `memstream.wiring.node`; this module owns the server and the order of
shutdown.
Shutdown runs the other way round: the API stops taking appends, the relay publishes what is
durable, processors commit what is done, the journal and the pool close.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator, Sequence

import asyncpg
import uvicorn
from fastapi import FastAPI

from core.config import Settings
from core.errors import JournalFenced
from core.sharding.journal import ShardedJournal
from memstream import event_loop, exit_codes
from memstream.api.access_log import log_config
from memstream.gc_tuning import tune_gc
from memstream.ops.admin_token import ensure_admin_token
from memstream.permissions import restrict_dir, restrict_umask
from memstream.shutdown import StopSignals
from memstream.wiring.node import build_node
from sinks.postgres.migrations import migrate
from sinks.postgres.pool import create_pool
from sinks.slatedb.journal import SlateJournal
from streams.admin import apply_topics
from streams.topics import load_topics

log = logging.getLogger("memstream.node")


async def run_node(settings: Settings, stop: asyncio.Event) -> None:
    """Run until `stop` is set (or a component fails, which is raised after a clean shutdown)."""
    restrict_dir(settings.data_path)
    log.info("configuration: %s", settings.describe())
    admin_token = ensure_admin_token(settings)
    pool = await create_pool(settings.postgres)
    try:
        await migrate(pool)
        report = await asyncio.to_thread(apply_topics, settings, load_topics())
        log.info("topics: %s", report.render().replace("\n", "; "))
        # With the shard membership the node's loop opens the shards it is given; else every one.
        journals = (
            ShardedJournal[SlateJournal](settings.journal_shards)
            if settings.membership
            else await open_journals(settings)
        )
        try:
            await _serve(
                settings,
                stop,
                pool,
                journals,
                created_topics=report.created,
                admin_token=admin_token,
            )
        finally:
            await journals.close()
    finally:
        await pool.close()


async def open_journals(settings: Settings) -> ShardedJournal[SlateJournal]:
    """The writers of every journal shard (`settings.journal_shards`): shard 0 first (its record of
    the shard count refuses another one: `JournalShardsMismatch`), then the others together; once
    every one is open, each records its layout if it had none. When one cannot be opened, those
    opened are closed again (nothing recorded) and its error raised."""
    shards = settings.journal_shards

    async def open_shard(shard: int) -> SlateJournal:
        return await SlateJournal.open(
            settings.shard_journal(shard),
            s3=settings.s3,
            flush_interval_ms=settings.journal_flush_interval_ms,
            max_message_bytes=settings.journal_max_message_bytes,
            shard=shard,
            shards=shards,
            record=False,
        )

    opened = {0: await open_shard(0)}
    results = await asyncio.gather(*(open_shard(k) for k in range(1, shards)), return_exceptions=True)
    failure: BaseException | None = None
    for shard, result in enumerate(results, start=1):
        if isinstance(result, BaseException):
            failure = failure or result
        else:
            opened[shard] = result
    journals = ShardedJournal(shards, opened)
    if failure is None:
        try:
            for journal in opened.values():
                await journal.record_layout()
        except BaseException as exc:
            failure = exc
    if failure is not None:
        with contextlib.suppress(Exception):
            await journals.close()
        raise failure
    if shards > 1:
        log.info("journal: %d shards, every one open on this node", shards)
    return journals


async def _serve(
    settings: Settings,
    stop: asyncio.Event,
    pool: asyncpg.Pool,
    journals: ShardedJournal[SlateJournal],
    *,
    created_topics: Sequence[str],
    admin_token: str,
) -> None:
    node = await build_node(settings, pool, journals, created_topics=created_topics, admin_token=admin_token)
    tune_gc()  # after start-up: its objects are frozen, the collector runs rarely (memstream.gc_tuning)
    server = _NodeServer(server_config(settings, node.app))
    components_stop = asyncio.Event()
    api = asyncio.create_task(server.serve(), name="api")
    components = node.tasks(components_stop)
    stopper = asyncio.create_task(stop.wait(), name="stop")
    try:
        done, _ = await asyncio.wait({api, *components, stopper}, return_when=asyncio.FIRST_COMPLETED)
        for task in done - {stopper}:
            error = task.exception()
            log.error("%s stopped unexpectedly%s", task.get_name(), f": {error!r}" if error else "")
    finally:
        # API first (no new appends), then the relay publishes what is durable and processors
        # commit what is done.
        server.should_exit = True
        await asyncio.gather(api, return_exceptions=True)
        components_stop.set()
        stopper.cancel()
        results = await asyncio.gather(*components, return_exceptions=True)
        await node.close()
    errors = [r for r in results if isinstance(r, Exception)]
    errors.sort(key=lambda error: not isinstance(error, JournalFenced))  # a fence explains the rest
    if errors and not stop.is_set():
        raise errors[0]


KEEP_ALIVE_S = 75
"""How long the API keeps an idle keep-alive connection open. Longer than clients keep idle
connections (httpx and many others: 5 s; load balancers: 60 s): with the server closing first (as
uvicorn's default of 5 s does), a client sending on a connection the server is closing at that
moment gets a broken request (seen as httpx ReadError on `memory_store` calls under load)."""


def server_config(settings: Settings, app: FastAPI) -> uvicorn.Config:
    """uvicorn's configuration of the node's API: on the node's loop (`memstream.event_loop`), with
    httptools, idle connections kept `KEEP_ALIVE_S`, credentials redacted from every log line, and
    the access log when `settings.access_log`."""
    return uvicorn.Config(
        app,
        host=settings.api_host,
        port=settings.api_port,
        log_level="info",
        lifespan="off",
        loop="none",  # serve() runs on the node's loop (`memstream.event_loop.run`: uvloop)
        http=event_loop.http_protocol(),
        log_config=log_config(),
        access_log=settings.access_log,
        timeout_keep_alive=KEEP_ALIVE_S,
    )


class _NodeServer(uvicorn.Server):
    """uvicorn without its own signal handling: the node owns SIGINT/SIGTERM and stops it in order."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def serve(settings: Settings) -> int:
    """Run the node until SIGINT/SIGTERM; returns the exit code (`memstream.exit_codes`: FENCED
    when another writer took the journal). After a signal the process ends within
    `settings.stop_deadline_s` whatever it is doing; the caller ends it with
    `shutdown.exit_process` (`memstream node` does)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    restrict_umask()

    async def main() -> None:
        stop = asyncio.Event()
        StopSignals(stop.set, deadline_s=settings.stop_deadline_s).install(asyncio.get_running_loop())
        await run_node(settings, stop)

    try:
        event_loop.run(main())
    except JournalFenced as exc:
        log.error(
            "node stopped for good (exit status %d): another writer opened the journal (%s). Restarting "
            "this node would fence that writer in turn. Decide which node owns the journal, stop the "
            "other one, and only then start this one again.",
            exit_codes.FENCED,
            exc,
        )
        return exit_codes.FENCED
    except Exception as exc:
        log.error("node stopped: %s", exc)
        return exit_codes.FAILED
    with contextlib.suppress(Exception):
        logging.shutdown()
    return 0
