"""run_worker (`memstream worker NAME...`): unknown names, SIGTERM handling, a crashed processor
restarted instead of ending the worker, a processor that cannot run ending it, the thread-memory
processors refusing to start without the node's journal. (They run end to end in a worker in
`tests/memstream/test_worker_thread_memory.py`.)"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from core.config import Settings
from memstream.engines import Engines
from memstream.wiring.processors import ProcessorFactory
from memstream.worker import WorkerCannotStart, run_worker
from streams.runtime import ProcessorCrashed, Record, RuntimeOptions, UnknownProcessor
from streams.runtime.errors import ProcessorCannotRun
from streams.runtime.processor import InvalidMessage, Processor
from streams.topics import TopicRegistry, default_registry
from tests.streams.runtime import conftest as runtime
from tests.streams.runtime.support import PgWriter, committed, create_effects_table, produce, wait_for_effects

# the runtime tests' fixtures: settings on each broker tier, short timings, the declared topics
rt_settings, rt_options, registry = runtime.rt_settings, runtime.rt_options, runtime.registry


def test_run_worker_names_the_registered_processors_for_an_unknown_name() -> None:
    factories: dict[str, ProcessorFactory] = {
        "beta": lambda s, _e: PgWriter("beta", s.postgres),
        "alpha": lambda s, _e: PgWriter("alpha", s.postgres),
    }
    with pytest.raises(UnknownProcessor, match=r"'nope'; registered processors: alpha, beta") as raised:
        run_worker("nope", Settings(), processors=factories)
    assert raised.value.available == ["alpha", "beta"]
    with pytest.raises(UnknownProcessor, match="'nope'"):
        run_worker(["alpha", "nope"], Settings(), processors=factories)


def test_run_worker_runs_until_sigterm(
    rt_settings: Settings, rt_options: RuntimeOptions, registry: TopicRegistry, pg_dsn: str
) -> None:
    asyncio.run(create_effects_table(pg_dsn))
    positions = produce(rt_settings, [{"id": i} for i in range(20)])
    seen: list[int] = []

    def terminate_when_done() -> None:
        seen.extend(asyncio.run(wait_for_effects(pg_dsn, "writer", 20)))
        os.kill(os.getpid(), signal.SIGTERM)

    watcher = threading.Thread(target=terminate_when_done, daemon=True)
    watcher.start()
    run_worker(
        "writer",
        rt_settings,
        options=rt_options,
        registry=registry,
        processors={"writer": lambda s, _e: PgWriter("writer", s.postgres)},
    )
    watcher.join(5)
    assert seen == list(range(20))
    assert sum(committed(rt_settings, "writer").values()) == len(positions)
    # run_worker returned to its caller: the stop's watchdog must not end this process later
    assert not [t for t in threading.enumerate() if isinstance(t, threading.Timer) and t.is_alive()]


def test_run_worker_restarts_a_crashed_processor_instead_of_exiting(
    rt_settings: Settings, rt_options: RuntimeOptions, registry: TopicRegistry, pg_dsn: str
) -> None:
    """Regression (issue 9, finding 1): `memstream worker NAME` exited when its processor crashed."""
    asyncio.run(create_effects_table(pg_dsn))
    produce(rt_settings, [{"id": i} for i in range(20)])
    built: list[Processor] = []

    async def a_bug(batch: Sequence[Record]) -> None:
        raise InvalidMessage(Record("elsewhere", 0, 0, None, None, (), None), "not from this batch")

    def factory(settings: Settings, _engines: Engines | None) -> Processor:
        writer = PgWriter("writer", settings.postgres, before_write=None if built else a_bug)
        built.append(writer)
        return writer

    def terminate_when_done() -> None:
        asyncio.run(wait_for_effects(pg_dsn, "writer", 20, within_s=60))
        os.kill(os.getpid(), signal.SIGTERM)

    watcher = threading.Thread(target=terminate_when_done, daemon=True)
    watcher.start()
    run_worker(
        "writer",
        rt_settings,
        options=replace(rt_options, restart_backoff_initial_s=0.1),
        registry=registry,
        processors={"writer": factory},
    )
    watcher.join(5)
    assert len(built) == 2
    assert asyncio.run(wait_for_effects(pg_dsn, "writer", 20, within_s=1)) == list(range(20))


def test_run_worker_exits_when_its_processor_cannot_run_here(tmp_path: Path) -> None:
    class NeedsTheNode(PgWriter):
        async def start(self) -> None:
            raise ProcessorCannotRun("this processor runs inside the node, not as a worker")

    options = RuntimeOptions(restart_backoff_initial_s=0.05)
    with pytest.raises(ProcessorCrashed, match="runs inside the node") as raised:
        run_worker(
            "writer",
            Settings(data_dir=tmp_path),
            options=options,
            registry=default_registry().with_dead_letter("writer"),
            processors={"writer": lambda s, _e: NeedsTheNode("writer", "postgresql://unused")},
        )
    assert isinstance(raised.value.__cause__, ProcessorCannotRun)


def test_thread_memory_processors_do_not_start_without_the_nodes_journal(settings: Settings) -> None:
    """The node never opened a journal in this data dir: nothing to read, the worker says so."""
    with pytest.raises(WorkerCannotStart, match="start the node first"):
        run_worker(["thresholds", "summarizer"], settings)


def test_thread_memory_processors_do_not_start_without_postgres(tmp_path: Path) -> None:
    unreachable = Settings(data_dir=tmp_path, postgres_dsn="postgresql://u@127.0.0.1:1/none")
    with pytest.raises(WorkerCannotStart, match="need Postgres"):
        run_worker(["flush"], unreachable)


def test_the_worker_command_lists_and_checks_groups(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from memstream.cli import main

    env = {"MEMSTREAM_DATA_DIR": str(tmp_path)}
    listed = CliRunner().invoke(main, ["worker", "--list"], env=env)
    assert listed.exit_code == 0 and "--group thread-memory: flush summarizer thresholds" in listed.output
    unknown = CliRunner().invoke(main, ["worker", "--group", "nope"], env=env)
    assert unknown.exit_code != 0 and "unknown group 'nope'; groups: thread-memory" in unknown.output
