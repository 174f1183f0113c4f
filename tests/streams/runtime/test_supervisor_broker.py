"""ProcessorSupervisor with real runtimes on a real broker and Postgres: a crashed processor is
restarted alone while the others keep consuming, and `/readyz` says so (degraded, then ready)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import replace
from typing import Any

import asyncpg
import httpx
import pytest

from core.config import Settings
from memstream.api import create_app
from memstream.wiring.api import build_api_deps
from sinks.slatedb.journal import SlateJournal
from streams.runtime.options import RuntimeOptions
from streams.runtime.processor import InvalidMessage, Processor, Record
from streams.runtime.supervisor import ProcessorSupervisor
from streams.topics import TopicRegistry
from tests.streams.runtime.support import PgWriter, effect_ids, produce, wait_for_effects


class HeldStart(PgWriter):
    """A writer whose start waits for `release` (a restart the test holds back)."""

    def __init__(self, name: str, dsn: str, release: asyncio.Event) -> None:
        super().__init__(name, dsn)
        self.release = release

    async def start(self) -> None:
        await self.release.wait()
        await super().start()


async def a_bug(batch: Sequence[Record]) -> None:
    """`process` rejecting a record that is not in its batch: a bug the runtime crashes on."""
    raise InvalidMessage(Record("elsewhere", 0, 0, None, None, (), None), "not from this batch")


@pytest.fixture
async def readyz(
    rt_settings: Settings, journal: SlateJournal, pool: asyncpg.Pool
) -> AsyncIterator[Callable[[ProcessorSupervisor], Any]]:
    clients: list[httpx.AsyncClient] = []

    async def get(supervisor: ProcessorSupervisor) -> httpx.Response:
        app = create_app(build_api_deps(rt_settings, journal, pool, processors=supervisor))
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://node")
        clients.append(client)
        return await client.get("/readyz")

    yield get
    for client in clients:
        await client.aclose()


async def until(condition: Callable[[], bool], within_s: float = 60.0) -> None:
    deadline = asyncio.get_running_loop().time() + within_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def test_a_crashed_processor_restarts_alone_while_the_others_consume_and_readyz_says_degraded(
    rt_settings: Settings,
    rt_options: RuntimeOptions,
    registry: TopicRegistry,
    effects_dsn: str,
    readyz: Callable[[ProcessorSupervisor], Any],
) -> None:
    """Regression (issue 9, finding 1): one crashed processor ended `ProcessorSupervisor.run`, and
    with it the node, for every account."""
    produce(rt_settings, [{"id": i} for i in range(40)])
    release = asyncio.Event()
    alphas: list[Processor] = []

    def alpha() -> Processor:
        processor = (
            PgWriter("alpha", effects_dsn, before_write=a_bug)
            if not alphas
            else HeldStart("alpha", effects_dsn, release)
        )
        alphas.append(processor)
        return processor

    supervisor = ProcessorSupervisor(
        {"alpha": alpha, "beta": lambda: PgWriter("beta", effects_dsn)},
        rt_settings,
        options=replace(rt_options, restart_backoff_initial_s=0.2),
        registry=registry,
    )
    stop, started = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(supervisor.run(stop, started=started))
    try:
        await asyncio.wait_for(started.wait(), 30)
        await until(lambda: len(alphas) == 2)  # crashed at its first batch; its restart is held
        assert supervisor.status("alpha").degraded
        response = await readyz(supervisor)
        assert response.status_code == 200  # the API and the journal still take appends
        body = response.json()
        assert body["status"] == "degraded"
        assert body["checks"]["postgres"] == {"ok": True} and body["checks"]["journal"] == {"ok": True}
        assert body["checks"]["processors"]["ok"] is False
        assert "alpha" in body["checks"]["processors"]["error"]
        assert "not in the batch it was given" in body["checks"]["processors"]["error"]
        assert body["processors"]["alpha"]["degraded"] is True
        assert body["processors"]["alpha"]["state"] in ("crashed", "starting")
        assert body["processors"]["beta"] == {"state": "running", "degraded": False, "restarts": 0}

        # beta keeps consuming, also what arrives while alpha is down
        produce(rt_settings, [{"id": i} for i in range(40, 80)])
        assert len(await wait_for_effects(effects_dsn, "beta", 80, within_s=60)) == 80
        assert supervisor.status("alpha").degraded and await effect_ids(effects_dsn, "alpha") == []
        assert not task.done()

        release.set()  # alpha's restart goes through: it catches up from the committed offsets
        assert await wait_for_effects(effects_dsn, "alpha", 80, within_s=60) == list(range(80))
        body = (await readyz(supervisor)).json()
        assert body["status"] == "ready" and body["checks"]["processors"] == {"ok": True}
        assert body["processors"]["alpha"]["state"] == "running"
        assert body["processors"]["alpha"]["restarts"] == 1
        assert "not in the batch" in body["processors"]["alpha"]["error"]  # the last crash, kept
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
