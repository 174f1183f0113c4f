"""A `ManagedProcess` dies with the process that started it, even when that one is killed -9."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil

PARENT = textwrap.dedent(
    """
    import signal, sys, time
    from pathlib import Path
    from memstream.embedded.process import ManagedProcess

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as in a shell's background job (nohup, a CI runner)

    extra = {} if sys.argv[2] == "default" else {"stop_signal": int(sys.argv[2])}
    child = ManagedProcess(
        name="sleeper", argv=["sleep", "120"], log_path=Path(sys.argv[1]), ready=lambda: True, **extra
    )
    child.start()
    print(child.pid, flush=True)
    time.sleep(120)
    """
)


def process_alive(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def _child_of_killed_parent(tmp_path: Path, stop_signal: str) -> int:
    """Start a parent that starts a `sleep 120` child, kill the parent -9; the child's pid."""
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(tmp_path / "child.log"), stop_signal],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    assert process_alive(child)
    parent.kill()
    parent.wait(10)
    return child


def _gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not process_alive(pid):
            return True
        time.sleep(0.05)
    return False


def test_a_child_gets_its_stop_signal_when_its_parent_is_killed(tmp_path: Path) -> None:
    child = _child_of_killed_parent(tmp_path, "default")
    try:
        assert _gone_within(child, 5), "the child outlived its killed parent"
    finally:
        if process_alive(child):
            os.kill(child, signal.SIGKILL)


def test_the_parent_death_signal_is_the_stop_signal(tmp_path: Path) -> None:
    # SIGINT stops `sleep` too: proves the configured signal (PostgreSQL's is SIGINT) is the one sent,
    # and that the child does not inherit its parent's "ignore SIGINT" (regression: CI runs in the
    # background, where the child outlived its parent)
    child = _child_of_killed_parent(tmp_path, str(int(signal.SIGINT)))
    try:
        assert _gone_within(child, 5), "the child outlived its killed parent"
    finally:
        if process_alive(child):
            os.kill(child, signal.SIGKILL)
