"""Run `memstream up` (the real supervisor) as a child process on its own data dir and free ports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from memstream.embedded.process import free_port


def stack_env(data_dir: Path) -> dict[str, str]:
    """The environment of a stack on `data_dir` with free ports for every server and the API."""
    return {
        **os.environ,
        "MEMSTREAM_DATA_DIR": str(data_dir),
        "MEMSTREAM_PORTS__BROKER": str(free_port()),
        "MEMSTREAM_PORTS__POSTGRES": str(free_port()),
        "MEMSTREAM_PORTS__REDIS": str(free_port()),
        "MEMSTREAM_API_PORT": str(free_port()),
    }


def run_memstream(env: dict[str, str], *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memstream", *args], env=env, capture_output=True, text=True, timeout=timeout
    )


def start_up(env: dict[str, str], log: Path, timeout: float = 120) -> subprocess.Popen[bytes]:
    """Start `memstream up` (output in `log`) and return once it says it is up."""
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "memstream", "up"], env=env, stdout=out, stderr=subprocess.STDOUT
        )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"memstream up exited with {proc.returncode}:\n{log.read_text()}")
        if "memstream is up" in log.read_text():
            return proc
        time.sleep(0.2)
    proc.kill()
    pytest.fail(f"memstream up did not come up:\n{log.read_text()}")


def running_pids(env: dict[str, str]) -> dict[str, int]:
    """The pid of every process of the stack, as `run/state.json` records them."""
    state: dict[str, Any] = json.loads((Path(env["MEMSTREAM_DATA_DIR"]) / "run" / "state.json").read_text())
    return {name: int(service["pid"]) for name, service in state["services"].items()}


def wait_for_line(log: Path, text: str, timeout: float = 60, *, after: int = 0) -> None:
    """Wait until `text` appears in `log` (at or after character `after`)."""
    deadline = time.monotonic() + timeout
    while text not in log.read_text()[after:]:
        if time.monotonic() > deadline:
            pytest.fail(f"{text!r} did not appear in {log} within {timeout:.0f}s:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)
