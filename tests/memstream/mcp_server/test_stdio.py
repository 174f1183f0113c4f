"""`memstream mcp` when no node answers: it says so, at start, and exits 1. (Serving a real node:
`test_mcp_node`.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from memstream.client import NO_RETRY, AsyncMemstreamClient
from memstream.embedded.process import free_port
from memstream.mcp_server.stdio import RemoteAgentTools
from memstream.mcp_server.tools import ToolFailed

KEY = "msk_" + "k" * 43


async def test_a_node_that_does_not_answer_is_node_unreachable() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    async with AsyncMemstreamClient(url, KEY, retry=NO_RETRY) as client:
        tools = RemoteAgentTools(client, url, "bot", user_id="ada")
        with pytest.raises(ToolFailed) as failed:
            await tools.call_tool("memory_recall", {"query": "x"})
    assert failed.value.code == "node_unreachable"
    assert failed.value.message.startswith(f"no memstream node answers at {url}")


def test_the_command_fails_at_start_without_a_node() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    started = subprocess.run(
        [sys.executable, "-m", "memstream", "mcp", "--agent", "bot", "--node", url],
        env={**os.environ, "MEMSTREAM_API_KEY": KEY},
        input="",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert started.returncode == 1
    assert f"node_unreachable: no memstream node answers at {url}" in started.stderr
    assert started.stdout == ""  # stdout is the protocol's: nothing else is written there


def test_an_invalid_agent_id_is_a_usage_error() -> None:
    started = subprocess.run(
        [sys.executable, "-m", "memstream", "mcp", "--agent", "bad agent", "--node", "http://127.0.0.1:1"],
        env={**os.environ, "MEMSTREAM_API_KEY": KEY},
        input="",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert started.returncode == 2
    assert "agent_id" in started.stderr


def test_the_command_says_where_the_key_comes_from(tmp_path: Path) -> None:
    env = {"MEMSTREAM_DATA_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    started = subprocess.run(
        [sys.executable, "-m", "memstream", "mcp", "--agent", "bot"],
        env={**env, "PYTHONPATH": ":".join(sys.path)},
        input="",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert started.returncode == 1
    assert "no API key: set MEMSTREAM_API_KEY, give --key-file, or run `memstream up`" in started.stderr
