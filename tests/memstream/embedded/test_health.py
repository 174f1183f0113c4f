"""The ClickHouse checks of `memstream status` / `doctor`: embedded (chdb installed) and a server
(`/ping` over HTTP, here a real local HTTP server answering like ClickHouse, then nothing)."""

from __future__ import annotations

import http.server
import json
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import SecretStr

from core.config import Settings
from memstream.embedded.health import clickhouse_check, doctor_checks, status_checks
from memstream.embedded.process import free_port


class _Ping(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        ok = self.path == "/ping"
        self.send_response(200 if ok else 404)
        self.end_headers()
        self.wfile.write(b"Ok.\n" if ok else b"")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def ping_server() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Ping)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def test_embedded_clickhouse_is_checked_as_part_of_the_node(tmp_path: Path) -> None:
    # chdb lives in the node's process: no separate liveness check (a stopped stack stays "not
    # running"), and doctor checks that the engine is installed
    assert clickhouse_check(Settings(data_dir=tmp_path)) is None
    assert any(c.name.startswith("chdb") and c.ok for c in doctor_checks(Settings(data_dir=tmp_path)))


def test_server_clickhouse_must_answer_ping(tmp_path: Path, ping_server: int) -> None:
    up = Settings(
        data_dir=tmp_path, clickhouse_dsn=SecretStr(f"http://u:secret@127.0.0.1:{ping_server}/memstream")
    )
    check = clickhouse_check(up)
    assert check is not None and check.ok, check
    assert "secret" not in check.detail  # credentials masked

    down = Settings(data_dir=tmp_path, clickhouse_dsn=SecretStr(f"http://127.0.0.1:{free_port()}/memstream"))
    check = clickhouse_check(down)
    assert check is not None and not check.ok and "does not answer" in check.detail
    assert "MEMSTREAM_CLICKHOUSE_DSN" in check.fix


def test_status_calls_a_killed_supervisor_gone_while_it_is_a_zombie(tmp_path: Path) -> None:
    settings = Settings(
        data_dir=tmp_path, broker_url=f"kafka://127.0.0.1:{free_port()}", api_port=free_port()
    )
    supervisor = subprocess.Popen(["sleep", "30"])
    supervisor.kill()  # not reaped: a zombie, as a killed `memstream up` is until its parent waits
    try:
        state = {"supervisor_pid": supervisor.pid, "services": {}}
        (tmp_path / "run").mkdir()
        (tmp_path / "run" / "state.json").write_text(json.dumps(state))
        time.sleep(0.2)
        _, checks = status_checks(settings)
        check = next(c for c in checks if c.name == "supervisor")
        assert not check.ok and "is gone" in check.detail, check
    finally:
        supervisor.wait(5)


def test_status_checks_the_worker_process_when_the_stack_runs_one(tmp_path: Path) -> None:
    settings = Settings(
        data_dir=tmp_path, broker_url=f"kafka://127.0.0.1:{free_port()}", api_port=free_port()
    )
    worker = subprocess.Popen(["sleep", "30"])
    (tmp_path / "run").mkdir()
    try:
        state = {"supervisor_pid": 0, "services": {"worker": {"pid": worker.pid, "log": "worker.log"}}}
        (tmp_path / "run" / "state.json").write_text(json.dumps(state))
        _, checks = status_checks(settings)
        check = next(c for c in checks if c.name == "worker (thread memory)")
        assert check.ok and f"pid {worker.pid}" in check.detail, check
        worker.kill()
        worker.wait(5)
        _, checks = status_checks(settings)
        check = next(c for c in checks if c.name == "worker (thread memory)")
        assert not check.ok and "is gone" in check.detail, check
    finally:
        worker.kill()
        worker.wait(5)
    (tmp_path / "run" / "state.json").write_text(json.dumps({"supervisor_pid": 0, "services": {}}))
    assert all(c.name != "worker (thread memory)" for c in status_checks(settings)[1])
