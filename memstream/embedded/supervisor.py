"""`memstream up`: start and supervise the embedded stack, then the node and the worker, until
Ctrl-C/SIGTERM.

Order: broker, PostgreSQL, Redis (each only when its URL is not configured), database + schema,
a first API key, then the node process (`memstream node`: API, journal writer, relays, the
projections and the compaction recovery), then the worker process (`memstream worker`: the
thread-memory processors - thresholds, flush, summarizer - on a read-only view of the node's
journal, so that they do not compete with the API for the node's event loop). Shutdown runs in
reverse order. `layout` says which processors each process hosts.

Faults: a process that dies (a server, the node, the worker) is restarted (`restarts.RestartBudget`:
at once, then with a doubling backoff; more than 5 restarts of one process within a minute stop the
stack with its log tail).
The journal is the source of truth, so the node rides out a restarted server: it republishes to a
broker that lost its topics, reconnects to PostgreSQL (the API answers 503 `postgres_unavailable`
meanwhile) and to Redis. A node that exits with `exit_codes.FENCED` (another writer took the
journal) is not restarted: the stack stops and `up` exits with that status.

Every child dies with the supervisor (`parent_death`), even when it is killed, and inherits the
data directory's lock (`datadir_lock`), so a second `up` stays off the data directory until the
last of them is gone. Files are private to the running user (`memstream.permissions`).
All data lives under the data directory; `run/state.json` describes the running stack for
`memstream status`, and `run/lock` is the lock.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from core.config import Settings, mask_url
from memstream import exit_codes
from memstream.embedded import services
from memstream.embedded.datadir_lock import DataDirLock
from memstream.embedded.process import ManagedProcess, ServiceError, require_free_port
from memstream.embedded.restarts import RestartBudget, RestartsExhausted
from memstream.permissions import private_data_dir, private_file, restrict_umask


def run_dir(settings: Settings) -> Path:
    return settings.data_path / "run"


def state_path(settings: Settings) -> Path:
    return run_dir(settings) / "state.json"


def read_state(settings: Settings) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads(state_path(settings).read_text())
    except (OSError, ValueError):
        return None
    return data


def node_process(settings: Settings) -> ManagedProcess:
    require_free_port("API", settings.api_port, "MEMSTREAM_API_PORT")
    env = {
        **os.environ,
        "MEMSTREAM_DATA_DIR": str(settings.data_path),
        "MEMSTREAM_NODE_PROCESSORS": json.dumps(list(layout(settings).node)),
        "PYTHONUNBUFFERED": "1",
    }
    url = f"http://{settings.api_host}:{settings.api_port}/healthz"
    return ManagedProcess(
        name="node",
        argv=[sys.executable, "-m", "memstream", "node"],
        log_path=settings.data_path / "logs" / "node.log",
        ready=lambda: http_ok(url),
        env=env,
    )


@dataclass(frozen=True)
class Layout:
    """Which processors the node hosts and which the worker runs (none: no worker process)."""

    node: tuple[str, ...]
    worker: tuple[str, ...]


def layout(settings: Settings) -> Layout:
    """The node hosts `settings.node_processors` when set, else every enabled processor but the
    thread-memory ones (so the chdb writers, `clickhouse-projection` and the opt-in
    `transcript-vectors`, run where the chdb path is open); the worker runs the thread-memory
    processors the node does not host."""
    from memstream.wiring.processors import THREAD_MEMORY, enabled, node_processor_names, processor_names

    if settings.node_processors is not None:
        node = node_processor_names(settings)
    else:
        node = [name for name in processor_names() if name not in THREAD_MEMORY and enabled(name, settings)]
    return Layout(node=tuple(node), worker=tuple(n for n in sorted(THREAD_MEMORY) if n not in node))


WORKER_READY_LINE = "worker runs processor(s)"
"""What the worker logs once its journal view and pool are open (`memstream.worker`)."""


def worker_process(settings: Settings, names: Sequence[str]) -> ManagedProcess:
    """The worker process running `names` (not started); ready once it logged that it runs them."""
    env = {**os.environ, "MEMSTREAM_DATA_DIR": str(settings.data_path), "PYTHONUNBUFFERED": "1"}
    log_path = settings.data_path / "logs" / "worker.log"
    try:
        start = log_path.stat().st_size  # the log is appended to across restarts
    except FileNotFoundError:
        start = 0

    def ready() -> bool:
        try:
            with log_path.open("rb") as log:
                log.seek(start)
                return WORKER_READY_LINE.encode() in log.read()
        except FileNotFoundError:
            return False

    return ManagedProcess(
        name="worker",
        argv=[sys.executable, "-m", "memstream", "worker", *names],
        log_path=log_path,
        ready=ready,
        env=env,
        nice=settings.worker_nice,
    )


def http_ok(url: str, timeout: float = 1.0) -> bool:
    try:
        return httpx.get(url, timeout=timeout).status_code == 200
    except httpx.HTTPError:
        return False


class NodeFenced(ServiceError):
    """The node exited with `exit_codes.FENCED`: another writer took the journal."""


@dataclass
class Supervisor:
    """`keep_fds` (the data directory's lock) are inherited by every child."""

    settings: Settings
    say: Callable[[str], None] = print
    keep_fds: tuple[int, ...] = ()
    services: list[ManagedProcess] = field(default_factory=list)
    node: ManagedProcess | None = None
    worker: ManagedProcess | None = None
    _stopping: bool = False
    _budgets: dict[str, RestartBudget] = field(default_factory=dict)

    def start(self) -> None:
        """Start every embedded server and the node; raise ServiceError with a fix on failure."""
        s = self.settings
        wanted = s.uses_embedded_services
        # 0711 when embedded PostgreSQL runs as its own OS user, which must reach <data dir>/postgres
        # (that directory is its own, 0700); 0700 otherwise. See memstream.permissions.
        traversable = wanted["postgres"] and services.postgres_runs_as_other_user()
        private_data_dir(s.data_path, traversable=traversable)
        for name in ("broker", "postgres", "redis"):
            if not wanted[name]:
                self.say(f"  {name:<9} external ({self._address(name)})")
                continue
            started = time.monotonic()
            self.services.append(self._start_service(name))
            self.say(f"  {name:<9} ready on {self._address(name)} ({time.monotonic() - started:.1f}s)")
            if name == "postgres":
                services.ensure_database(s.ports.postgres)
        self._prepare_node()
        started = time.monotonic()
        self.node = self._start_node()
        self.say(
            f"  {'node':<9} ready on http://{s.api_host}:{s.api_port} ({time.monotonic() - started:.1f}s)"
            f" - API docs at http://{s.api_host}:{s.api_port}/docs"
        )
        hosted = layout(s)
        self.say(f"  {'':<9} node hosts processor(s): {', '.join(hosted.node) or 'none'}")
        if s.sql.enabled:
            self.say(
                f"  {'sql':<9} ClickHouse HTTP interface for data teams on {s.sql_url} (read-only; "
                "a key: memstream keys create --data-access --account ACCOUNT)"
            )
        self.write_state()  # the node's pid, as soon as it serves (the worker starts at a lower priority)
        if hosted.worker:
            started = time.monotonic()
            self.worker = self._start_worker()
            self.say(
                f"  {'worker':<9} ready: processor(s) {', '.join(hosted.worker)}"
                f" ({time.monotonic() - started:.1f}s) - log: {self.worker.log_path}"
            )
        self.write_state()

    def _start_service(self, name: str) -> ManagedProcess:
        s = self.settings
        makers: dict[str, Callable[[], ManagedProcess]] = {
            "broker": lambda: services.broker_process(s.data_path, s.ports.broker),
            "postgres": lambda: services.postgres_process(s.data_path, s.ports.postgres),
            "redis": lambda: services.redis_process(s.data_path, s.ports.redis),
        }
        proc = dataclasses.replace(makers[name](), keep_fds=self.keep_fds)
        proc.start()
        return proc

    def _start_node(self) -> ManagedProcess:
        node = dataclasses.replace(node_process(self.settings), keep_fds=self.keep_fds)
        node.start(timeout=120)
        return node

    def _start_worker(self) -> ManagedProcess:
        worker = worker_process(self.settings, layout(self.settings).worker)
        worker = dataclasses.replace(worker, keep_fds=self.keep_fds)
        worker.start(timeout=120)
        return worker

    def _address(self, name: str) -> str:
        s = self.settings
        return {"broker": s.broker_bootstrap, "postgres": mask_url(s.postgres), "redis": mask_url(s.redis)}[
            name
        ]

    def _prepare_node(self) -> None:
        """Schema and a first API key, so a newcomer can call the API right away."""
        from memstream.embedded.bootstrap import prepare

        key_file = self.settings.data_path / "api-key"
        created = prepare(self.settings, key_file)
        private_file(key_file)
        if created:
            self.say(f"  api key   created for account 'default': stored in {key_file}")
        else:
            self.say(f"  api key   for account 'default' in {key_file}")

    def write_state(self) -> None:
        s = self.settings
        state = {
            "supervisor_pid": os.getpid(),
            "started_at": time.time(),
            "data_dir": str(s.data_path),
            "api": f"http://{s.api_host}:{s.api_port}",
            "services": {
                p.name: {"pid": p.pid, "log": str(p.log_path)}
                for p in [*self.services, self.node, self.worker]
                if p
            },
            "config": s.describe(),
        }
        path = state_path(s)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2))
        tmp.replace(path)

    def watch(self, poll: float = 0.5) -> None:
        """Block until asked to stop; restart whatever died (module doc). Raises ServiceError when a
        process cannot stay up, NodeFenced when the node lost the journal to another writer."""
        while not self._stopping:
            time.sleep(poll)
            if self._stopping:
                break
            for i, proc in enumerate(self.services):
                if not proc.alive():
                    if proc.name == "broker" and self.worker is not None and self.worker.alive():
                        # the embedded broker starts empty: the worker's consumers must not carry their
                        # positions onto its new topics (memstream.ops.topic_restart does this for the
                        # node's). Killed (an orderly stop would wait on the dead broker; offsets are
                        # committed only after effects are durable), it is restarted below afresh.
                        self.say("  stopping worker while the broker restarts (its consumers start afresh)")
                        self.worker.stop(timeout=10, sig=signal.SIGKILL)
                    self.services[i] = self._restart(proc, functools.partial(self._start_service, proc.name))
                    self._announce(self.services[i], proc)
            if self.node is not None and not self.node.alive():
                self._check_not_fenced(self.node)
                dead = self.node
                self.node = self._restart(dead, self._start_node)
                self._announce(self.node, dead)
            if self.worker is not None and not self.worker.alive():
                dead = self.worker
                self.worker = self._restart(dead, self._start_worker)
                self._announce(self.worker, dead)

    def _check_not_fenced(self, node: ManagedProcess) -> None:
        if node.proc is not None and node.proc.returncode == exit_codes.FENCED:
            raise NodeFenced(
                f"the node stopped for good: another writer opened the journal at "
                f"{mask_url(self.settings.journal)} (node log: {node.log_path}). memstream up does not "
                "restart it, because a restarted node would fence that writer in turn. Decide which one "
                "owns the journal, stop the other, then run `memstream up` again."
            )

    def _restart(self, dead: ManagedProcess, start: Callable[[], ManagedProcess]) -> ManagedProcess:
        """Start `dead`'s replacement with `start`, within its restart budget (module doc)."""
        name = dead.name
        code = dead.proc.returncode if dead.proc is not None else None
        budget = self._budgets.setdefault(name, RestartBudget())
        reason = f"exited (code {code})"
        while True:
            try:
                delay = budget.next_delay(time.monotonic())
            except RestartsExhausted as exc:
                raise ServiceError(
                    f"{name} cannot stay up: it {reason} and needed {exc.count} restarts within a minute; "
                    f"its log is {dead.log_path}:\n{dead.log_tail()}"
                ) from None
            when = f" in {delay:.0f}s" if delay else ""
            self.say(f"  {name} {reason}; restarting{when} - log: {dead.log_path}")
            if not self._pause(delay):
                return dead  # asked to stop meanwhile
            try:
                replacement = start()
            except ServiceError as exc:
                reason = f"did not start again ({exc})"
                continue
            return replacement

    def _announce(self, current: ManagedProcess, dead: ManagedProcess) -> None:
        """Record the stack in `run/state.json`, then say that `dead` is ready again when `current`
        replaced it (in this order: whoever reads the line finds the new pid in the state)."""
        self.write_state()
        if current is not dead:
            self.say(f"  {current.name} ready again")

    def _pause(self, seconds: float) -> bool:
        """Sleep `seconds` unless asked to stop (False then)."""
        deadline = time.monotonic() + seconds
        while not self._stopping and time.monotonic() < deadline:
            time.sleep(min(0.1, deadline - time.monotonic()))
        return not self._stopping

    def request_stop(self, *_: object) -> None:
        self._stopping = True

    def stop(self) -> None:
        self._stopping = True
        if self.worker is not None:
            self.say("  stopping worker")
            self.worker.stop(timeout=30)
        if self.node is not None:
            self.say("  stopping node")
            self.node.stop(timeout=30)
        for proc in reversed(self.services):
            self.say(f"  stopping {proc.name}")
            proc.stop()
        try:
            state_path(self.settings).unlink()
        except FileNotFoundError:
            pass


def up(settings: Settings, say: Callable[[str], None] = print) -> int:
    """Run the embedded stack in the foreground; returns the process exit code (`exit_codes`)."""
    restrict_umask()
    lock = DataDirLock(settings.data_path)
    lock.acquire(say=say)
    supervisor = Supervisor(settings, say=say, keep_fds=(lock.fd,))
    previous = {sig: signal.signal(sig, supervisor.request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    say(f"memstream: starting the embedded stack in {settings.data_path}")
    code = exit_codes.OK
    try:
        supervisor.start()
        say("memstream is up. Ctrl-C stops it; `memstream status` shows it from another shell.")
        supervisor.watch()
    except NodeFenced as exc:
        say(f"error: {exc}")
        code = exit_codes.FENCED
    except ServiceError as exc:
        say(f"error: {exc}")
        code = exit_codes.FAILED
    except subprocess.SubprocessError as exc:
        say(f"error: {exc}")
        code = exit_codes.FAILED
    finally:
        say("memstream: shutting down")
        supervisor.stop()
        lock.release()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return code
