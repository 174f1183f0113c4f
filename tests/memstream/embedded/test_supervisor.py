"""`memstream up` end to end: start, status, refuse a second `up`, clean stop, restart with data intact."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import psutil
import pytest

from tests.memstream.embedded.up_process import run_memstream as _memstream
from tests.memstream.embedded.up_process import stack_env as _env
from tests.memstream.embedded.up_process import start_up as _up


def _stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    proc.send_signal(sig)
    assert proc.wait(60) == 0


@pytest.fixture
def stack_env(tmp_path: Path) -> dict[str, str]:
    return _env(tmp_path / "data")


@pytest.mark.engine
def test_up_status_stop_and_restart_keeps_data(stack_env: dict[str, str], tmp_path: Path) -> None:
    data_dir = Path(stack_env["MEMSTREAM_DATA_DIR"])
    api = f"http://127.0.0.1:{stack_env['MEMSTREAM_API_PORT']}"
    proc = _up(stack_env, tmp_path / "up-1.log")
    try:
        status = _memstream(stack_env, "status", "--json")
        assert status.returncode == 0, status.stdout + status.stderr
        state = json.loads(status.stdout)["state"]
        pids = [svc["pid"] for svc in state["services"].values()]
        assert set(state["services"]) == {"broker", "postgres", "redis", "node", "worker"}

        key = (data_dir / "api-key").read_text().strip()
        headers = {"Authorization": f"Bearer {key}"}
        body = {"agent_id": "a1", "messages": [{"message_id": "m-1", "role": "user", "content": "hello"}]}
        response = httpx.post(f"{api}/v1/threads/t1/messages", json=body, headers=headers, timeout=10)
        assert response.status_code == 201, response.text

        # a crashed node is restarted by the supervisor, and nothing acknowledged is lost
        os.kill(state["services"]["node"]["pid"], signal.SIGKILL)
        deadline = time.monotonic() + 60
        while "node ready again" not in (tmp_path / "up-1.log").read_text():
            assert time.monotonic() < deadline, (tmp_path / "up-1.log").read_text()
            time.sleep(0.2)
        response = httpx.get(f"{api}/v1/threads/t1/messages", headers=headers, timeout=10)
        assert [m["message_id"] for m in response.json()["messages"]] == ["m-1"]
        pids.append(
            json.loads(_memstream(stack_env, "status", "--json").stdout)["state"]["services"]["node"]["pid"]
        )

        second = _memstream(stack_env, "up")
        assert second.returncode != 0
        assert "already running" in second.stderr + second.stdout
    finally:
        _stop(proc)
    assert all(not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie" for pid in pids)
    assert not (data_dir / "run" / "state.json").exists()
    after = _memstream(stack_env, "status")
    assert after.returncode == 3, after.stdout

    proc = _up(stack_env, tmp_path / "up-2.log")
    try:
        assert "api key   for account 'default'" in (tmp_path / "up-2.log").read_text()
        response = httpx.get(f"{api}/v1/threads/t1/messages", headers=headers, timeout=10)
        assert response.status_code == 200, response.text
        assert [m["message_id"] for m in response.json()["messages"]] == ["m-1"]
    finally:
        _stop(proc, signal.SIGINT)


@pytest.mark.engine
def test_up_reports_a_taken_port_and_starts_nothing(stack_env: dict[str, str], tmp_path: Path) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        env = {**stack_env, "MEMSTREAM_PORTS__POSTGRES": str(sock.getsockname()[1])}
        result = _memstream(env, "up")
    assert result.returncode == 1
    out = result.stdout + result.stderr
    assert "postgres: port" in out and "MEMSTREAM_PORTS__POSTGRES" in out
    assert "stopping broker" in out  # what had started is stopped again
    assert not (Path(env["MEMSTREAM_DATA_DIR"]) / "run" / "state.json").exists()


@pytest.mark.engine
def test_doctor_names_what_to_fix(stack_env: dict[str, str]) -> None:
    env = {**stack_env, "MEMSTREAM_BROKER_URL": "kafka://127.0.0.1:1", "MEMSTREAM_JOURNAL_URL": "ftp://x"}
    result = _memstream(env, "doctor")
    assert result.returncode == 1
    assert "[FAIL] broker" in result.stdout and "MEMSTREAM_BROKER_URL" in result.stdout
    assert "[FAIL] journal url" in result.stdout
    assert "[ok  ] tansu binary" in result.stdout


@pytest.mark.engine
def test_invalid_configuration_is_a_clear_error(stack_env: dict[str, str]) -> None:
    result = _memstream({**stack_env, "MEMSTREAM_ENVIRONMENT": "Not Valid!"}, "config")
    assert result.returncode != 0
    assert "invalid configuration" in result.stderr and "environment" in result.stderr
