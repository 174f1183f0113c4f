"""`memstream up`'s process layout: the thread-memory processors (thresholds, flush, summarizer) run
in the worker process on a read-only view of the node's journal, the node hosts the rest; a thread
that crosses the threshold is summarized by the worker, and a killed worker is restarted and goes on
summarizing, also after the embedded broker restarted empty."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import httpx
import psutil
import pytest

from tests.memstream.embedded.up_process import run_memstream, stack_env, start_up, wait_for_line
from tests.memstream.thread_memory import append_messages, wait_for_summary


def _pids(env: dict[str, str]) -> dict[str, int]:
    status = run_memstream(env, "status", "--json")
    services: dict[str, dict[str, object]] = json.loads(status.stdout)["state"]["services"]
    return {name: int(str(service["pid"])) for name, service in services.items()}


@pytest.mark.engine
def test_up_runs_thread_memory_in_the_worker_and_restarts_it(tmp_path: Path) -> None:
    env = stack_env(tmp_path / "data")
    data_dir = Path(env["MEMSTREAM_DATA_DIR"])
    up_log = tmp_path / "up.log"
    proc = start_up(env, up_log)
    pids: list[int] = []
    try:
        assert "node hosts processor(s): clickhouse-projection, qdrant-projection" in up_log.read_text()
        running = _pids(env)
        assert set(running) == {"broker", "postgres", "redis", "node", "worker"}
        pids.extend(running.values())
        # the worker yields the CPU to the node (settings.worker_nice, default 10)
        assert psutil.Process(running["worker"]).nice() == psutil.Process(running["node"]).nice() + 10
        worker_log = data_dir / "logs" / "worker.log"
        assert "worker runs processor(s) flush, summarizer, thresholds" in worker_log.read_text()

        key = (data_dir / "api-key").read_text().strip()
        url = f"http://127.0.0.1:{env['MEMSTREAM_API_PORT']}"
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30) as api:
            append_messages(api, "trip", "ada", 55, "My name is Ada. I prefer window seats.")
            context = wait_for_summary(api, "trip")
            assert context["metadata"]["summary_version"] == 1
            # the worker summarized it, the node did not host the summarizer
            assert "summary v1 of dev/default/bot/trip" in worker_log.read_text()
            node_log = (data_dir / "logs" / "node.log").read_text()
            assert "summary v1 of" not in node_log
            assert "as group memstream.thresholds" not in node_log

            # a killed worker is restarted, and the new one summarizes the next thread
            mark = len(up_log.read_text())
            os.kill(running["worker"], signal.SIGKILL)
            wait_for_line(up_log, "worker ready again", after=mark)
            restarted = _pids(env)["worker"]
            assert restarted != running["worker"]
            assert psutil.Process(restarted).nice() == psutil.Process(running["node"]).nice() + 10
            pids.append(restarted)
            append_messages(api, "later", "bob", 52, "My name is Bob.")
            assert wait_for_summary(api, "later")["metadata"]["summary_version"] == 1

            # the embedded broker restarts empty: the worker is restarted with it (fresh consumers)
            # and summarizes on the new topics
            mark = len(up_log.read_text())
            os.kill(_pids(env)["broker"], signal.SIGKILL)
            wait_for_line(up_log, "broker ready again", after=mark)
            wait_for_line(up_log, "worker ready again", after=mark)
            pids.extend(_pids(env).values())
            append_messages(api, "after-broker", "cy", 51, "My name is Cy.")
            assert wait_for_summary(api, "after-broker", timeout=180)["metadata"]["summary_version"] == 1
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(90) == 0, up_log.read_text()[-3000:]
    # the worker stops with the stack
    deadline = time.monotonic() + 10
    while any(psutil.pid_exists(p) and psutil.Process(p).status() != "zombie" for p in pids):
        assert time.monotonic() < deadline, pids
        time.sleep(0.2)
