"""Stopping a process that runs one asyncio loop: SIGINT/SIGTERM never lost, obeyed within a
deadline, and an exit that does not wait for native libraries.

asyncio's `loop.add_signal_handler` carries a signal into the loop as one byte written to the
loop's self-pipe - the pipe every `call_soon_threadsafe` from a worker thread writes to as well.
When the loop is busy and worker threads (SlateDB, Kafka, ClickHouse, `to_thread`) keep scheduling
callbacks, the pipe fills up and the signal's byte is dropped ("Exception ignored when trying to
write to the signal wakeup fd: BlockingIOError"): the signal is lost and the process never stops.

`StopSignals` installs Python-level handlers (`signal.signal`) instead: the interpreter runs them
in the main thread, the loop's thread, however full the pipe is. On the first signal the handler
schedules `on_stop` in the loop (an orderly stop) and starts a watchdog thread; if the process
has not exited `deadline_s` later - a stop waiting on an unreachable server, or a worker thread
the interpreter waits for at exit - the watchdog ends it at once (`os._exit(exit_codes.FAILED)`).
A second signal ends it at once too. Ending at once is safe for the journal: an append is
acknowledged only after it is durable, and everything else is rebuilt from the journal.

A process that goes on after the orderly stop (a library call such as `run_worker` returning to
its caller, a test) calls `close()` instead of `uninstall()`: it restores the handlers and disarms
the watchdog, which would otherwise end the caller `deadline_s` after the signal.

`exit_process(code)` ends the process after its orderly stop without the interpreter's
finalization, where native libraries tear down (the in-process ClickHouse engine and the Rust
runtimes took seconds there, out of reach of any Python watchdog) or abort.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Any, NoReturn

from memstream import exit_codes

log = logging.getLogger("memstream.node")


def _exit_now(message: str, code: int) -> NoReturn:
    """Write `message` to stderr without taking any lock (another thread may hold logging's), exit."""
    with contextlib.suppress(OSError):
        os.write(2, f"memstream: {message}\n".encode())
    os._exit(code)


class StopSignals:
    """See the module doc. `install` in the loop's thread (the main thread), before serving."""

    def __init__(
        self,
        on_stop: Callable[[], None],
        *,
        deadline_s: float,
        signals: Sequence[signal.Signals] = (signal.SIGINT, signal.SIGTERM),
    ) -> None:
        self.on_stop = on_stop
        self.deadline_s = deadline_s
        self.signals = tuple(signals)
        self.received: list[signal.Signals] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._previous: dict[signal.Signals, Any] = {}
        self._watchdog: threading.Timer | None = None

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        for sig in self.signals:
            self._previous[sig] = signal.signal(sig, self._handle)

    def uninstall(self) -> None:
        """Restore the previous handlers (a watchdog already started keeps running)."""
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()

    def close(self) -> None:
        """The orderly stop is over and the process goes on (module doc): restore the previous
        handlers and disarm the watchdog."""
        self.uninstall()
        watchdog, self._watchdog = self._watchdog, None
        if watchdog is not None:
            watchdog.cancel()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        sig = signal.Signals(signum)
        self.received.append(sig)
        if len(self.received) > 1:
            _exit_now(
                f"second {sig.name}: exiting at once (acknowledged appends are durable)", exit_codes.FAILED
            )
        self._watchdog = threading.Timer(self.deadline_s, self._expired, args=(sig,))
        self._watchdog.daemon = True
        self._watchdog.start()
        loop = self._loop
        if loop is None:
            return
        try:
            loop.call_soon_threadsafe(self._stop_in_loop, sig)
        except RuntimeError:  # the loop is closed: the process is exiting already (watchdog armed)
            pass

    def _stop_in_loop(self, sig: signal.Signals) -> None:
        log.info("%s received: stopping (at most %.0f s)", sig.name, self.deadline_s)
        self.on_stop()

    def _expired(self, sig: signal.Signals) -> None:
        _exit_now(
            f"the orderly stop after {sig.name} took longer than {self.deadline_s:.0f} s: exiting now "
            "(acknowledged appends are durable; unfinished work is redone from the journal on restart)",
            exit_codes.FAILED,
        )


def exit_process(code: int) -> NoReturn:
    """Flush the logs and stdio, then end the process with `code`, skipping finalization (module
    doc). Call it only once everything durable was closed."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)
