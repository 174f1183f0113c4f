"""Embedded PostgreSQL starts again right after its postmaster was killed -9 and is still a
zombie (nobody reaped it yet): the stale `postmaster.pid` is cleared, never a second try needed.
A server that really runs on the data directory is refused, naming its processes."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import psutil
import pytest

from memstream.embedded import services
from memstream.embedded.postgres_lock import clear_stale_postmaster_pid
from memstream.embedded.process import ServiceError, free_port


@pytest.mark.engine
def test_postgres_starts_right_after_a_kill_while_the_old_postmaster_is_a_zombie(tmp_path: Path) -> None:
    port = free_port()
    first = services.postgres_process(tmp_path, port)
    first.start()
    assert first.pid is not None and first.proc is not None
    killed = first.pid
    os.kill(killed, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while psutil.Process(killed).status() != psutil.STATUS_ZOMBIE:  # not reaped: we are its parent
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert str(killed) == (tmp_path / "postgres" / "postmaster.pid").read_text().split("\n")[0]
    second = services.postgres_process(tmp_path, port)
    try:
        second.start()  # refused with `lock file "postmaster.pid" already exists` before the fix
        assert psutil.Process(killed).status() == psutil.STATUS_ZOMBIE  # still there, and no obstacle
        with pytest.raises(ServiceError, match=rf"processes .*{second.pid}.* still run in"):
            clear_stale_postmaster_pid(tmp_path / "postgres", wait_s=0.5)  # a live server is not stale
    finally:
        second.stop()
        first.proc.wait(5)
