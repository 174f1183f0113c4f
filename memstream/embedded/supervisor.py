"""`memstream up`: start and supervise the embedded stack, then the node, until Ctrl-C/SIGTERM.

Order: broker, PostgreSQL, Redis (each only when its URL is not configured), database + schema,
a first API key, then the node process (`memstream node`: API, journal writer, relay,
processors). A node that crashes is restarted (the journal and relay resume where they were); an
embedded server that dies stops everything with its log tail. Shutdown runs in reverse order.

All data lives under the data directory; `run/state.json` describes the running stack for
`memstream status`, and `run/lock` keeps a second `up` off the same data directory.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx

from memstream.config import Settings
from memstream.embedded import services
from memstream.embedded.process import ManagedProcess, ServiceError, require_free_port

NODE_RESTARTS_PER_MINUTE = 5


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


class DataDirLock:
    """An exclusive lock on the data directory, held for the supervisor's lifetime."""

    def __init__(self, settings: Settings) -> None:
        self.path = run_dir(settings) / "lock"
        self._file: IO[str] | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = self.path.open("a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            handle.close()
            raise ServiceError(
                f"memstream is already running on {self.path.parent.parent} (pid {holder}). "
                "Use `memstream status` to see it, stop it with Ctrl-C/SIGTERM, or use another --data-dir."
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        self._file = handle

    def release(self) -> None:
        if self._file is not None:
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None


def node_process(settings: Settings) -> ManagedProcess:
    require_free_port("API", settings.api_port, "MEMSTREAM_API_PORT")
    env = {**os.environ, "MEMSTREAM_DATA_DIR": str(settings.data_path), "PYTHONUNBUFFERED": "1"}
    url = f"http://{settings.api_host}:{settings.api_port}/healthz"
    return ManagedProcess(
        name="node",
        argv=[sys.executable, "-m", "memstream", "node"],
        log_path=settings.data_path / "logs" / "node.log",
        ready=lambda: http_ok(url),
        env=env,
    )


def http_ok(url: str, timeout: float = 1.0) -> bool:
    try:
        return httpx.get(url, timeout=timeout).status_code == 200
    except httpx.HTTPError:
        return False


@dataclass
class Supervisor:
    settings: Settings
    say: Callable[[str], None] = print
    services: list[ManagedProcess] = field(default_factory=list)
    node: ManagedProcess | None = None
    _stopping: bool = False
    _restarts: list[float] = field(default_factory=list)

    def start(self) -> None:
        """Start every embedded server and the node; raise ServiceError with a fix on failure."""
        s = self.settings
        s.data_path.mkdir(parents=True, exist_ok=True)
        wanted = s.uses_embedded_services
        makers: dict[str, Callable[[], ManagedProcess]] = {
            "broker": lambda: services.broker_process(s.data_path, s.ports.broker),
            "postgres": lambda: services.postgres_process(s.data_path, s.ports.postgres),
            "redis": lambda: services.redis_process(s.data_path, s.ports.redis),
        }
        for name, make in makers.items():
            if not wanted[name]:
                self.say(f"  {name:<9} external ({self._address(name)})")
                continue
            proc = make()
            started = time.monotonic()
            proc.start()
            self.services.append(proc)
            self.say(f"  {name:<9} ready on {self._address(name)} ({time.monotonic() - started:.1f}s)")
            if name == "postgres":
                services.ensure_database(s.ports.postgres)
        self._prepare_node()
        self.node = node_process(s)
        started = time.monotonic()
        self.node.start(timeout=120)
        self.say(
            f"  {'node':<9} ready on http://{s.api_host}:{s.api_port} ({time.monotonic() - started:.1f}s)"
            f" - API docs at http://{s.api_host}:{s.api_port}/docs"
        )
        self.write_state()

    def _address(self, name: str) -> str:
        s = self.settings
        from memstream.config import mask_url

        return {"broker": s.broker_bootstrap, "postgres": mask_url(s.postgres), "redis": mask_url(s.redis)}[
            name
        ]

    def _prepare_node(self) -> None:
        """Schema and a first API key, so a newcomer can call the API right away."""
        from memstream.embedded.bootstrap import prepare

        key_file = self.settings.data_path / "api-key"
        created = prepare(self.settings, key_file)
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
                for p in [*self.services, *([self.node] or [])]
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
        """Block until asked to stop; restart a crashed node, stop on a dead embedded server."""
        while not self._stopping:
            time.sleep(poll)
            if self._stopping:
                break
            for proc in self.services:
                if not proc.alive():
                    raise ServiceError(
                        f"embedded {proc.name} exited unexpectedly; its log is {proc.log_path}:\n"
                        f"{proc.log_tail()}"
                    )
            if self.node is not None and not self.node.alive():
                self._restart_node()

    def _restart_node(self) -> None:
        assert self.node is not None
        now = time.monotonic()
        self._restarts = [t for t in self._restarts if now - t < 60] + [now]
        if len(self._restarts) > NODE_RESTARTS_PER_MINUTE:
            raise ServiceError(
                f"the node crashed {len(self._restarts)} times within a minute; see {self.node.log_path}:\n"
                f"{self.node.log_tail()}"
            )
        code = self.node.proc.returncode if self.node.proc else None
        self.say(f"  node exited (code {code}); restarting - log: {self.node.log_path}")
        self.node = node_process(self.settings)
        self.node.start(timeout=120)
        self.write_state()
        self.say("  node ready again")

    def request_stop(self, *_: object) -> None:
        self._stopping = True

    def stop(self) -> None:
        self._stopping = True
        if self.node is not None:
            self.say("  stopping node")
            self.node.stop(timeout=30)
        for proc in reversed(self.services):
            self.say(f"  stopping {proc.name}")
            proc.stop(sig=services.POSTGRES_STOP_SIGNAL if proc.name == "postgres" else signal.SIGTERM)
        try:
            state_path(self.settings).unlink()
        except FileNotFoundError:
            pass


def up(settings: Settings, say: Callable[[str], None] = print) -> int:
    """Run the embedded stack in the foreground; returns the process exit code."""
    lock = DataDirLock(settings)
    lock.acquire()
    supervisor = Supervisor(settings, say=say)
    previous = {sig: signal.signal(sig, supervisor.request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    say(f"memstream: starting the embedded stack in {settings.data_path}")
    code = 0
    try:
        supervisor.start()
        say("memstream is up. Ctrl-C stops it; `memstream status` shows it from another shell.")
        supervisor.watch()
    except ServiceError as exc:
        say(f"error: {exc}")
        code = 1
    except subprocess.SubprocessError as exc:
        say(f"error: {exc}")
        code = 1
    finally:
        say("memstream: shutting down")
        supervisor.stop()
        lock.release()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return code
