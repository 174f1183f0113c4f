"""Two real nodes on one journal: the one fenced by the other stops for good with exit status
`exit_codes.FENCED` and says why; the other keeps serving."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx

from core.config import Settings
from memstream import exit_codes
from memstream.embedded.bootstrap import create_key
from memstream.embedded.process import free_port
from tests.memstream.node_process import node_env, node_process


def test_a_fenced_node_exits_with_the_fenced_status(settings: Settings, tmp_path: Path) -> None:
    journal_url = f"file://{tmp_path / 'shared-journal'}"
    key = asyncio.run(create_key(settings, "acme"))
    envs = [
        {
            **node_env(settings, free_port()),
            "MEMSTREAM_DATA_DIR": str(tmp_path / name),  # own engines (chdb, Qdrant Edge), shared journal
            "MEMSTREAM_JOURNAL_URL": journal_url,
        }
        for name in ("first", "second")
    ]
    first = node_process(envs[0], tmp_path / "first.log")
    second = node_process(envs[1], tmp_path / "second.log")
    first.start(timeout=120)
    try:
        second.start(timeout=120)  # opening the journal fences the first node's writer
        assert first.proc is not None
        try:
            code = first.proc.wait(30)
        except Exception:
            raise AssertionError(
                "the fenced node kept running:\n" + (tmp_path / "first.log").read_text()[-3000:]
            ) from None
        log = (tmp_path / "first.log").read_text()
        assert code == exit_codes.FENCED, log[-3000:]
        assert "another writer opened the journal" in log and "stop the other one" in log, log[-3000:]

        base = f"http://127.0.0.1:{envs[1]['MEMSTREAM_API_PORT']}"
        body = {
            "agent_id": "agent-1",
            "messages": [{"message_id": "m-1", "role": "user", "content": "still here"}],
        }
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=10) as api:
            response = api.post("/v1/threads/t-1/messages", json=body)
        assert response.status_code == 201, response.text
        time.sleep(1.5)  # a manifest poll later, the second node still owns the journal
        assert second.alive(), (tmp_path / "second.log").read_text()[-3000:]
    finally:
        second.stop()
        first.stop()
