"""A real node busy catching up a large journal, with appends coming in, exits within a few
seconds of SIGTERM (it lost the signal, or sat in native teardown for seconds, before)."""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from pathlib import Path

import httpx

from core.config import Settings
from core.journal.models import NewMessage, ThreadRef
from memstream.embedded.bootstrap import create_key
from memstream.embedded.process import free_port
from sinks.slatedb.journal import SlateJournal
from tests.memstream.node_process import node_env, node_process

BACKLOG = 60_000
STOP_DEADLINE_S = 1.5


async def _fill_journal(settings: Settings, messages: int) -> None:
    journal = await SlateJournal.open(settings.journal, flush_interval_ms=1)
    try:
        for batch in range(messages // 1000):
            thread = ThreadRef(
                environment=settings.environment, account_id="acme", thread_id=f"t-{batch % 100}"
            )
            words = [
                NewMessage(role="user", content=f"backlog message {batch}-{i} " * 5) for i in range(1000)
            ]
            await journal.append(thread, "agent-1", None, words)
    finally:
        await journal.close()


def _append_until(stop: threading.Event, base: str, key: str, worker: int) -> None:
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=5) as client:
        while not stop.is_set():
            body = {"agent_id": "agent-1", "messages": [{"role": "user", "content": "more load " * 20}]}
            try:
                client.post(f"/v1/threads/live-{worker}/messages", json=body)
            except httpx.HTTPError:
                time.sleep(0.05)


def test_node_exits_within_its_deadline_after_sigterm_under_load(settings: Settings, tmp_path: Path) -> None:
    asyncio.run(_fill_journal(settings, BACKLOG))  # a fresh topic: the node republishes all of it
    key = asyncio.run(create_key(settings, "acme"))
    env = {**node_env(settings, free_port()), "MEMSTREAM_STOP_DEADLINE_S": str(STOP_DEADLINE_S)}
    node = node_process(env, tmp_path / "node.log")
    node.start(timeout=120)
    assert node.proc is not None
    stop = threading.Event()
    base = f"http://127.0.0.1:{env['MEMSTREAM_API_PORT']}"
    load = [threading.Thread(target=_append_until, args=(stop, base, key, i), daemon=True) for i in range(12)]
    for thread in load:
        thread.start()
    try:
        time.sleep(8)  # the processors have joined and are consuming the backlog
        assert node.alive(), (tmp_path / "node.log").read_text()[-3000:]
        signalled = time.monotonic()
        node.proc.send_signal(signal.SIGTERM)
        try:
            node.proc.wait(STOP_DEADLINE_S + 5)
        except Exception:
            raise AssertionError(
                f"the node did not exit within {STOP_DEADLINE_S + 5:.0f}s of SIGTERM:\n"
                + (tmp_path / "node.log").read_text()[-3000:]
            ) from None
        elapsed = time.monotonic() - signalled
        assert elapsed < STOP_DEADLINE_S + 2.5, f"exited {elapsed:.1f}s after SIGTERM"
    finally:
        stop.set()
        node.stop(timeout=5, sig=signal.SIGKILL)
        for thread in load:
            thread.join(10)
