"""A Tansu broker of a test's own (the session broker must not be restarted): `restart()` loses
every topic and consumer group, as the memory-only embedded broker does."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from memstream.embedded import services
from memstream.embedded.process import ManagedProcess, free_port


class OwnBroker:
    """A Tansu on a fixed port of its own, started by `own_broker`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self.restarts = 0
        self._proc: ManagedProcess | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        self._proc = services.broker_process(self.root / f"run-{self.restarts}", self.port)
        self._proc.start()

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.stop()
            self._proc = None

    def restart(self) -> None:
        """Stop it and start a fresh one on the same port (memory lost)."""
        self.stop()
        self.restarts += 1
        self.start()


@contextmanager
def own_broker(root: Path) -> Iterator[OwnBroker]:
    broker = OwnBroker(root)
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()
