"""`StopSignals`: a signal is never lost, however full the loop's self-pipe is; the stop has a
deadline; a second signal ends the process at once. Each case runs in its own process, on asyncio's
loop and on the node's (`memstream.event_loop.run`: uvloop)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

from memstream import exit_codes

PRELUDE = textwrap.dedent(
    """
    import asyncio, os, signal, sys, threading, time
    from memstream import event_loop
    from memstream.shutdown import StopSignals, exit_process
    """
)


@pytest.fixture(params=["asyncio.run", "event_loop.run"])
def runner(request: pytest.FixtureRequest) -> str:
    """How the case's process runs its loop (`RUN(main())`)."""
    return str(request.param)


def _run(runner: str, body: str, *, timeout: float = 30) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-c", PRELUDE + f"RUN = {runner}\n" + textwrap.dedent(body)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    return result, time.monotonic() - started


def test_a_signal_arriving_while_the_self_pipe_is_full_still_stops_the_loop(runner: str) -> None:
    # Worker threads fill the loop's self-pipe (call_soon_threadsafe) while the loop is blocked,
    # then SIGTERM arrives: with loop.add_signal_handler its wake-up byte is dropped and it is lost.
    result, _ = _run(
        runner,
        """
        async def main():
            loop = asyncio.get_running_loop()
            stop = asyncio.Event()
            StopSignals(stop.set, deadline_s=60).install(loop)

            def flood():
                for _ in range(200_000):
                    loop.call_soon_threadsafe(lambda: None)

            def block_then_signal():
                worker = threading.Thread(target=flood)
                worker.start()
                worker.join()
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.1)

            loop.call_soon(block_then_signal)
            await asyncio.wait_for(stop.wait(), 10)
            print("stopped in order")

        RUN(main())
        """,
    )
    assert result.returncode == 0, result.stderr
    assert "stopped in order" in result.stdout


def test_a_stop_that_outlives_the_deadline_ends_the_process(runner: str) -> None:
    result, elapsed = _run(
        runner,
        """
        async def main():
            StopSignals(lambda: None, deadline_s=1.0).install(asyncio.get_running_loop())  # never stops
            os.kill(os.getpid(), signal.SIGTERM)
            await asyncio.sleep(60)

        RUN(main())
        """,
    )
    assert result.returncode == exit_codes.FAILED
    assert elapsed < 10
    assert "took longer than 1 s: exiting now" in result.stderr


def test_a_closed_stop_never_ends_the_process_that_goes_on(runner: str) -> None:
    """Regression: `run_worker` returned to its caller (pytest) with the watchdog armed, which ended
    the caller with exit code 1 `deadline_s` later (CI died in an unrelated test)."""
    result, _ = _run(
        runner,
        """
        async def main():
            stop = asyncio.Event()
            signals = StopSignals(stop.set, deadline_s=0.5)
            signals.install(asyncio.get_running_loop())
            os.kill(os.getpid(), signal.SIGTERM)
            await asyncio.wait_for(stop.wait(), 10)
            signals.close()

        RUN(main())
        time.sleep(2)  # four deadlines
        print("went on")
        """,
    )
    assert result.returncode == 0, result.stderr
    assert "went on" in result.stdout


def test_a_second_signal_ends_the_process_at_once(runner: str) -> None:
    result, elapsed = _run(
        runner,
        """
        async def main():
            StopSignals(lambda: None, deadline_s=60).install(asyncio.get_running_loop())
            os.kill(os.getpid(), signal.SIGINT)
            await asyncio.sleep(0.2)
            os.kill(os.getpid(), signal.SIGTERM)
            await asyncio.sleep(60)

        RUN(main())
        """,
    )
    assert result.returncode == exit_codes.FAILED
    assert elapsed < 10
    assert "second SIGTERM: exiting at once" in result.stderr


def test_exit_process_flushes_output_and_uses_the_code() -> None:
    result, _ = _run(
        "asyncio.run",
        """
        import logging
        logging.basicConfig(level=logging.INFO, stream=sys.stderr)
        print("buffered line", end="")
        logging.getLogger("x").info("logged line")
        exit_process(4)
        """,
    )
    assert result.returncode == 4
    assert result.stdout == "buffered line"
    assert "logged line" in result.stderr
