"""A PostgreSQL server of one test (not the session's): for tests that kill and restart it.

`private_postgres(directory)` starts the embedded server on a free port with its data in
`directory` and the `memstream` database created, and stops it afterwards. `kill()` is kill -9
(the process is reaped); `restart()` starts it again on the same data and port, so clients'
DSNs stay valid. As root, PostgreSQL's OS user must traverse `directory`'s parents: keep it out of
pytest's tmp dir, whose root a concurrent pytest session makes 0700 again (use `/tmp`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from memstream.embedded import services
from memstream.embedded.process import ManagedProcess, free_port


@dataclass
class PrivatePostgres:
    data_dir: Path
    port: int
    server: ManagedProcess

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{services.PG_DATABASE}"

    def kill(self) -> None:
        assert self.server.proc is not None
        os.kill(self.server.proc.pid, signal.SIGKILL)
        self.server.proc.wait(10)

    def restart(self) -> None:
        self.server = services.postgres_process(self.data_dir, self.port)
        self.server.start()


@contextlib.contextmanager
def private_postgres() -> Iterator[PrivatePostgres]:
    """A started private server in a fresh directory under /tmp (removed afterwards)."""
    directory = Path(tempfile.mkdtemp(prefix="memstream-pg-", dir="/tmp"))
    port = free_port()
    postgres = PrivatePostgres(directory, port, services.postgres_process(directory, port))
    try:
        postgres.server.start()
        services.ensure_database(port)
        yield postgres
    finally:
        postgres.server.stop()
        shutil.rmtree(directory, ignore_errors=True)
