"""A stale `postmaster.pid` after a kill: wait for the old server's processes, then clear it.

PostgreSQL refuses to start while `postmaster.pid` names a process that exists - also a zombie of
a killed postmaster that nobody reaped yet, or an unrelated process that reused the pid - and
while processes of the old server (its backends, which exit shortly after the postmaster died)
are still attached to its shared memory. `clear_stale_postmaster_pid(pgdata)`, called before
every start of the embedded server:
1. waits up to `wait_s` until no live process runs in `pgdata` (PostgreSQL's processes all have
   the data directory as their working directory); a killed server's processes are exiting. When
   some are still there after the wait, it raises ServiceError naming them: a server is running
   on this data directory, and starting a second one would be refused anyway.
2. then removes `postmaster.pid`: no process of an earlier server is alive, so whatever pid it
   names is gone, a zombie or someone else's.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import psutil

from memstream.embedded.process import ServiceError

log = logging.getLogger("memstream.embedded")

OLD_SERVER_WAIT_S = 15.0


def processes_in(directory: Path) -> list[int]:
    """Pids of the live (not zombie) processes whose working directory is `directory`."""
    target = str(directory.resolve())
    found: list[int] = []
    for proc in psutil.process_iter():
        try:
            if proc.status() != psutil.STATUS_ZOMBIE and proc.cwd() == target:
                found.append(proc.pid)
        except (psutil.Error, OSError):
            continue
    return found


def clear_stale_postmaster_pid(pgdata: Path, wait_s: float = OLD_SERVER_WAIT_S) -> None:
    """See the module doc. No-op when `pgdata` has no `postmaster.pid`."""
    pid_file = pgdata / "postmaster.pid"
    if not pid_file.exists():
        return
    deadline = time.monotonic() + wait_s
    running = processes_in(pgdata)
    while running and time.monotonic() < deadline:
        time.sleep(0.1)
        running = processes_in(pgdata)
    if running:
        raise ServiceError(
            f"postgres: processes {', '.join(map(str, running))} still run in {pgdata} after {wait_s:.0f}s "
            "(a PostgreSQL server on this data directory, maybe left over from an earlier memstream). "
            "Stop them (`kill PID`; `kill -9 PID` if they do not react), then start again."
        )
    try:
        recorded = pid_file.read_text().split("\n", 1)[0].strip()
        pid_file.unlink()
    except FileNotFoundError:
        return
    log.info("postgres: removed the stale %s (pid %s is not a running server)", pid_file, recorded or "?")
