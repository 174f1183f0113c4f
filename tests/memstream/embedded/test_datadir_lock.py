"""The data directory's lock: refused while a supervisor lives, held by its children after it
was killed, taken once they are gone."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from memstream.embedded.datadir_lock import DataDirLock, process_alive
from memstream.embedded.process import ServiceError

SUPERVISOR = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from memstream.embedded.datadir_lock import DataDirLock
    from memstream.embedded.process import ManagedProcess

    data = Path(sys.argv[1])
    lock = DataDirLock(data)
    lock.acquire()
    # a child that needs a while to stop, as a node does: it ignores SIGTERM for 3 s
    slow = (
        "import signal, time; signal.signal(signal.SIGTERM, lambda *a: time.sleep(3) or exit(0)); "
        "time.sleep(120)"
    )
    child = ManagedProcess(
        name="slow", argv=[sys.executable, "-c", slow], log_path=data / "child.log", ready=lambda: True,
        keep_fds=(lock.fd,),
    )
    child.start()
    time.sleep(0.3)  # let the child install its handler
    print(child.pid, flush=True)
    time.sleep(120)
    """
)


def _supervisor(data: Path) -> tuple[subprocess.Popen[bytes], int]:
    proc = subprocess.Popen(
        [sys.executable, "-c", SUPERVISOR, str(data)],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert proc.stdout is not None
    return proc, int(proc.stdout.readline())


def test_a_live_supervisor_keeps_a_second_one_out_at_once(tmp_path: Path) -> None:
    proc, _child = _supervisor(tmp_path / "data")
    try:
        started = time.monotonic()
        with pytest.raises(ServiceError, match=rf"already running .* \(pid {proc.pid}\)"):
            DataDirLock(tmp_path / "data").acquire(wait_s=30)
        assert time.monotonic() - started < 5, "a live supervisor must be refused without waiting"
    finally:
        proc.kill()
        proc.wait(10)


def test_the_children_of_a_killed_supervisor_hold_the_lock_until_they_exit(tmp_path: Path) -> None:
    data = tmp_path / "data"
    proc, child = _supervisor(data)
    proc.kill()  # kill -9: the child gets SIGTERM (parent death) and takes 3 s to stop
    proc.wait(10)
    lock = DataDirLock(data)
    try:
        assert process_alive(child)
        with pytest.raises(ServiceError, match=rf"still in use .* {child} did not exit"):
            lock.acquire(wait_s=0.5)
        lines: list[str] = []
        lock.acquire(wait_s=30, say=lines.append)  # waits for the child, then takes the lock
        assert not process_alive(child)
        assert any("waiting for the processes of a memstream that stopped" in line for line in lines), lines
        assert (data / "run" / "lock").read_text() == str(os.getpid())
    finally:
        lock.release()
        if process_alive(child):
            os.kill(child, 9)


def test_a_recorded_pid_reused_by_another_program_is_not_a_running_supervisor(tmp_path: Path) -> None:
    data = tmp_path / "data"
    lock_file = data / "run" / "lock"
    lock_file.parent.mkdir(parents=True)
    with lock_file.open("a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        holder = subprocess.Popen(["sleep", "1"], pass_fds=(handle.fileno(),))  # keeps the lock 1 s
    lock_file.write_text(str(holder.pid))  # as if a dead supervisor's pid had been reused by `sleep`
    lock = DataDirLock(data)
    try:
        lock.acquire(wait_s=30)  # waits for the holder instead of calling `sleep` a running memstream
        assert holder.poll() is not None or not process_alive(holder.pid)
    finally:
        lock.release()
        holder.wait(10)
