"""Servers a bench starts for itself in a temp directory, all stopped and the directory removed at the end.

The benches run as scripts (`.venv/bin/python bench/bench_x.py`), so this module is imported as
`server_group` from the bench directory.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path

from memstream.embedded import services
from memstream.embedded.process import ManagedProcess


class ServerGroup:
    """The processes started so far, in start order."""

    def __init__(self) -> None:
        self.started: list[ManagedProcess] = []

    def start(self, proc: ManagedProcess, timeout: float = 30.0) -> None:
        """Start `proc` (waits until it is ready); it is stopped when the group ends."""
        proc.start(timeout=timeout)
        self.started.append(proc)


@contextlib.contextmanager
def server_group(work: Path, *, keep: bool = False) -> Iterator[ServerGroup]:
    """A group whose started processes are stopped on exit (last started first; Postgres with its
    own stop signal; a failing stop is ignored), then `work` is removed unless `keep`."""
    group = ServerGroup()
    try:
        yield group
    finally:
        for proc in reversed(group.started):
            with contextlib.suppress(Exception):
                proc.stop(sig=services.POSTGRES_STOP_SIGNAL if proc.name == "postgres" else 15)
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
