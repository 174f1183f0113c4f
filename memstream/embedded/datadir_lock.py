"""The data directory's lock: one `memstream up` per data directory, held while any of its
processes lives.

`DataDirLock.acquire` takes an exclusive `flock` on `<data dir>/run/lock` and writes the
supervisor's pid into it. The supervisor hands the locked descriptor to every child it starts
(`ManagedProcess.keep_fds`): a `flock` belongs to the open file description, so the lock stays
held until the supervisor AND every child have exited - a killed supervisor's children (which
are dying: `parent_death`) keep a second `up` off the data directory until they are gone.

A second `acquire` while the lock is held:
- refuses at once when the pid in the file is a live memstream process (another `up` runs);
- otherwise waits up to `wait_s` for the holders - children of a supervisor that died, stopping
  on their parent-death signal - to exit, then takes the lock; when they outlive the wait it
  refuses, naming them.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

import psutil

from memstream.embedded.process import ServiceError

LEFTOVER_WAIT_S = 30.0
"""How long `acquire` waits for the processes of a supervisor that died to exit."""


def process_alive(pid: int) -> bool:
    """True when `pid` is a running process (a zombie - exited, not yet reaped - is not)."""
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False
    except psutil.AccessDenied:
        return True


def _is_memstream(pid: int) -> bool:
    """True when `pid` is a live process running memstream (not a pid reused by something else)."""
    if not process_alive(pid):
        return False
    try:
        return "memstream" in " ".join(psutil.Process(pid).cmdline())
    except psutil.AccessDenied:
        return True
    except psutil.Error:
        return False


def lock_holders(path: Path) -> list[int]:
    """Pids of the live processes that have `path` open (those holding its lock)."""
    target = str(path.resolve())
    holders: list[int] = []
    for proc in psutil.process_iter():
        try:
            if any(f.path == target for f in proc.open_files()) and proc.pid != os.getpid():
                holders.append(proc.pid)
        except (psutil.Error, OSError):
            continue
    return holders


class DataDirLock:
    """An exclusive lock on the data directory (module doc)."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.path = data_dir / "run" / "lock"
        self._file: IO[str] | None = None

    @property
    def fd(self) -> int:
        """The locked descriptor, for children to inherit (`ManagedProcess.keep_fds`)."""
        assert self._file is not None, "acquire() first"
        return self._file.fileno()

    def acquire(self, wait_s: float = LEFTOVER_WAIT_S, say: Callable[[str], None] | None = None) -> None:
        """Take the lock (module doc); ServiceError saying what to do when it cannot."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = self.path.open("a+")
        try:
            self._take(handle, wait_s, say)
        except BaseException:
            handle.close()
            raise
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        self._file = handle

    def _take(self, handle: IO[str], wait_s: float, say: Callable[[str], None] | None) -> None:
        if _try_lock(handle):
            return
        handle.seek(0)
        recorded = handle.read().strip()
        supervisor = int(recorded) if recorded.isdigit() else 0
        if supervisor and _is_memstream(supervisor):
            raise ServiceError(
                f"memstream is already running on {self.data_dir} (pid {supervisor}). Use `memstream "
                "status` to see it, stop it with Ctrl-C/SIGTERM, or use another --data-dir."
            )
        if say is not None:
            say(
                f"  waiting for the processes of a memstream that stopped (pid {recorded or '?'}) to exit: "
                f"{', '.join(map(str, lock_holders(self.path))) or 'exiting'}"
            )
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            time.sleep(0.1)
            if _try_lock(handle):
                return
        holders = lock_holders(self.path)
        raise ServiceError(
            f"the data directory {self.data_dir} is still in use by processes of a memstream whose "
            f"supervisor (pid {recorded or '?'}) is gone: {', '.join(map(str, holders)) or 'unknown pids'} "
            f"did not exit within {wait_s:.0f}s. Stop them (`kill PID`; `kill -9 PID` if they do not "
            "react), then start again."
        )

    def release(self) -> None:
        """Close the supervisor's descriptor. The lock is free once no child holds it either (a
        child that is still stopping keeps the data directory locked until it exits)."""
        if self._file is not None:
            self._file.close()
            self._file = None


def _try_lock(handle: IO[str]) -> bool:
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True
