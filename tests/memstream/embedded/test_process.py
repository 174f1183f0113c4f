"""`ManagedProcess`: a child started with `nice` runs at the supervisor's niceness plus `nice`, its
threads too; without it, at the supervisor's."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import psutil
import pytest

from memstream.embedded.process import ManagedProcess

CHILD = textwrap.dedent(
    """
    import os, sys, threading, time
    from pathlib import Path

    def niceness_of_a_thread() -> None:
        Path(sys.argv[1]).write_text(str(os.getpriority(os.PRIO_PROCESS, threading.get_native_id())))

    thread = threading.Thread(target=niceness_of_a_thread)
    thread.start()
    thread.join()
    time.sleep(60)
    """
)


@pytest.mark.engine  # starts a process (a `ManagedProcess`), though no server
@pytest.mark.parametrize("nice", [0, 7])
def test_a_child_runs_at_the_niceness_it_was_given(tmp_path: Path, nice: int) -> None:
    report = tmp_path / "thread-nice"
    child = ManagedProcess(
        name="child",
        argv=[sys.executable, "-c", CHILD, str(report)],
        log_path=tmp_path / "child.log",
        ready=report.exists,
        nice=nice,
    )
    child.start(timeout=30)
    try:
        assert child.proc is not None
        mine = os.nice(0)
        expected = min(19, mine + nice)
        assert psutil.Process(child.proc.pid).nice() == expected
        assert int(report.read_text()) == expected  # a thread it started inherited it
    finally:
        child.stop()
