"""`memstream.node.server_config`: the node's uvicorn configuration."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi import FastAPI

from core.config import Settings
from memstream.http_protocol import CoalescedHttpToolsProtocol
from memstream.node import KEEP_ALIVE_S, server_config


def test_the_api_parses_with_httptools_and_logs_each_request_by_default(tmp_path: Path) -> None:
    config = server_config(Settings(data_dir=tmp_path), FastAPI())
    assert config.http is CoalescedHttpToolsProtocol
    assert config.access_log is True


def test_idle_connections_outlive_the_clients_keep_alive(tmp_path: Path) -> None:
    """Clients (httpx: 5 s, load balancers: 60 s) drop idle connections before the server does."""
    config = server_config(Settings(data_dir=tmp_path), FastAPI())
    assert config.timeout_keep_alive == KEEP_ALIVE_S > 60


def test_memstream_access_log_false_turns_the_access_log_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMSTREAM_ACCESS_LOG", "false")
    config = server_config(Settings(data_dir=tmp_path), FastAPI())
    assert config.access_log is False
