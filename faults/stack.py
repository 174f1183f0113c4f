"""A stack under test: one real `memstream up` (the supervisor) on its own data dir and free ports.

`Stack.start()` runs `python -m memstream --data-dir DIR up` as a child process (a
`memstream.embedded.process.ManagedProcess`, output appended to `{DIR}.up.log`) and waits until
the node's `/readyz` answers 200. The pids of the supervisor's children come from the supervisor's
own `run/state.json` (`memstream.embedded.supervisor.read_state`), re-read at every use: after the
supervisor restarts a component, its new pid is there.

`extra_env` configures the stack further (e.g. an external PostgreSQL or another stack's journal:
see `faults.scenarios.second_writer`). `sweep()` kills, by pid, any process left that belongs to
this stack (its data dir in the command line or `MEMSTREAM_DATA_DIR`, or its broker port): the
harness never leaves a process behind, even when the supervisor orphaned its children.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from core.config import EmbeddedPorts, Settings
from memstream.embedded.process import ManagedProcess, free_port
from memstream.embedded.supervisor import http_ok, read_state

COMPONENTS = ("broker", "postgres", "redis", "node")


@dataclass(frozen=True)
class Ports:
    broker: int
    postgres: int
    redis: int
    api: int

    @classmethod
    def free(cls) -> Ports:
        return cls(free_port(), free_port(), free_port(), free_port())


@dataclass
class Stack:
    """See the module doc."""

    name: str
    data_dir: Path
    ports: Ports
    extra_env: dict[str, str] = field(default_factory=dict)
    up: ManagedProcess | None = field(default=None, init=False)
    _log_offset: int = field(default=0, init=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.ports.api}"

    @property
    def log_path(self) -> Path:
        return self.data_dir.with_name(f"{self.data_dir.name}.up.log")

    def settings(self) -> Settings:
        """The stack's configuration as its node resolves it (data dir, ports)."""
        p = self.ports
        return Settings(
            data_dir=self.data_dir,
            api_port=p.api,
            ports=EmbeddedPorts(broker=p.broker, postgres=p.postgres, redis=p.redis),
            **_settings_overrides(self.extra_env),
        )

    def env(self) -> dict[str, str]:
        p = self.ports
        inherited = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTREAM_")}
        return {
            **inherited,
            "MEMSTREAM_DATA_DIR": str(self.data_dir),
            "MEMSTREAM_PORTS__BROKER": str(p.broker),
            "MEMSTREAM_PORTS__POSTGRES": str(p.postgres),
            "MEMSTREAM_PORTS__REDIS": str(p.redis),
            "MEMSTREAM_API_PORT": str(p.api),
            "PYTHONUNBUFFERED": "1",
            **self.extra_env,
        }

    # ---- lifecycle

    def start(self, timeout: float = 120.0) -> float:
        """Start `memstream up`; seconds until /readyz answered. Raises ServiceError (with the
        output's tail) when it exits or is not ready within `timeout`."""
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        self._log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        self.up = ManagedProcess(
            name=f"memstream up ({self.name})",
            argv=[sys.executable, "-m", "memstream", "--data-dir", str(self.data_dir), "up"],
            log_path=self.log_path,
            ready=self.ready,
            env=self.env(),
        )
        started = time.monotonic()
        self.up.start(timeout=timeout)
        return time.monotonic() - started

    def ready(self) -> bool:
        return http_ok(f"{self.url}/readyz", timeout=2.0)

    def alive(self) -> bool:
        return self.up is not None and self.up.alive()

    def exit_code(self) -> int | None:
        if self.up is None or self.up.proc is None:
            return None
        return self.up.proc.poll()

    def output(self) -> str:
        """What `memstream up` printed since its last start."""
        try:
            with self.log_path.open("rb") as handle:
                handle.seek(self._log_offset)
                return handle.read().decode(errors="replace")
        except OSError:
            return ""

    def output_tail(self, lines: int = 12) -> str:
        return "\n".join(self.output().splitlines()[-lines:])

    def stop(self, timeout: float = 60.0) -> list[str]:
        """SIGTERM `up` (it stops its children in order), then sweep; returns what the sweep killed."""
        if self.up is not None:
            self.up.stop(timeout=timeout)
        return self.sweep()

    # ---- processes

    def state(self) -> dict[str, Any] | None:
        return read_state(self.settings())

    def pid(self, component: str) -> int | None:
        """The pid of `component` (broker, postgres, redis, node) as the supervisor recorded it."""
        state = self.state() or {}
        service = state.get("services", {}).get(component)
        pid = service.get("pid") if isinstance(service, dict) else None
        return int(pid) if isinstance(pid, int) else None

    def supervisor_pid(self) -> int | None:
        return self.up.pid if self.up is not None else None

    def processes(self) -> list[psutil.Process]:
        """Every live process of this stack (module doc), the supervisor included; never this
        process or one of its ancestors."""
        data_dir = str(self.data_dir)
        ports = (f"127.0.0.1:{self.ports.broker}", f"127.0.0.1:{self.ports.redis}")  # Redis renames itself
        me = psutil.Process()
        exclude = {me.pid, *(p.pid for p in me.parents())}
        found = []
        for proc in psutil.process_iter(["pid", "cmdline", "status"]):
            if proc.pid in exclude or proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            cmdline = " ".join(proc.info["cmdline"] or ())
            mine = data_dir in cmdline or any(port in cmdline for port in ports)
            if not mine and "memstream" in cmdline:
                try:
                    mine = proc.environ().get("MEMSTREAM_DATA_DIR") == data_dir
                except (psutil.Error, OSError):
                    mine = False
            if mine:
                found.append(proc)
        return found

    def sweep(self) -> list[str]:
        """SIGKILL every process of this stack still alive; returns `name(pid)` of each."""
        killed: dict[int, str] = {}
        for proc in self.processes():
            with contextlib.suppress(psutil.Error):
                name = proc.name()
                proc.send_signal(signal.SIGKILL)
                killed[proc.pid] = name
        if self.up is not None and self.up.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.up.proc.wait(10)
        _wait_gone(list(killed))
        return [f"{name}({pid})" for pid, name in killed.items()]


def _wait_gone(pids: list[int], timeout: float = 30.0) -> None:
    """Wait until the processes are gone, reaped zombies included: a zombie still holds its pid,
    and PostgreSQL refuses to start while the pid in its lock file exists."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(psutil.pid_exists(pid) for pid in pids):
        time.sleep(0.2)


def running(pid: int) -> bool:
    """True while `pid` is a process that is not a zombie."""
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def _settings_overrides(extra_env: dict[str, str]) -> dict[str, Any]:
    """Settings fields for the `MEMSTREAM_*` URLs in `extra_env` (the ones the harness sets)."""
    names = {
        "MEMSTREAM_POSTGRES_DSN": "postgres_dsn",
        "MEMSTREAM_REDIS_URL": "redis_url",
        "MEMSTREAM_JOURNAL_URL": "journal_url",
        "MEMSTREAM_OBJECT_STORE_URL": "object_store_url",
    }
    return {names[key]: value for key, value in extra_env.items() if key in names}
