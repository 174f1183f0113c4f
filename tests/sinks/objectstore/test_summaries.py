from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from core.config import S3Settings, Settings
from core.journal.models import ThreadRef
from core.summaries.models import SummaryUnavailable, summary_key
from memstream.embedded.process import free_port
from sinks.objectstore.summaries import ObjectStoreSummaryReader, open_object_store

THREAD = ThreadRef(environment="test", account_id="acme", thread_id="t1")
SUMMARY: dict[str, Any] = {
    "version": 3,
    "timestamp": "2026-11-29T10:00:00Z",
    "last_message_offset": 41,
    "last_message_id": "m-41",
    "content": "The user ordered a blue bike; delivery is due Friday.",
    "token_count": 14,
    "message_count": 42,
}


def _write_local(root: Path, key: str, body: bytes) -> None:
    path = root / key
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(body)


def test_summary_key_layout() -> None:
    assert summary_key("test", "acme", "bot", "t1") == "test/accounts/acme/agents/bot/threads/t1/summary.json"


async def test_local_missing_then_present(tmp_path: Path) -> None:
    root = tmp_path / "objects"
    reader = ObjectStoreSummaryReader.from_settings(
        Settings(data_dir=tmp_path, object_store_url=f"file://{root}")
    )
    assert await reader.read(THREAD, "bot") is None
    _write_local(
        root, summary_key("test", "acme", "bot", "t1"), json.dumps({**SUMMARY, "future_field": 1}).encode()
    )
    summary = await reader.read(THREAD, "bot")
    assert summary is not None
    assert (summary.version, summary.last_message_offset, summary.message_count) == (3, 41, 42)
    assert summary.content.startswith("The user ordered")
    # the key names the agent and account: another agent's or account's thread has no summary
    assert await reader.read(THREAD, "other-bot") is None
    assert (
        await reader.read(ThreadRef(environment="test", account_id="globex", thread_id="t1"), "bot") is None
    )


async def test_default_object_store_is_under_data_dir(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    _write_local(tmp_path / "objects", summary_key("test", "acme", "bot", "t1"), json.dumps(SUMMARY).encode())
    summary = await ObjectStoreSummaryReader.from_settings(settings).read(THREAD, "bot")
    assert summary is not None and summary.version == 3


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (b"{not json", "corrupt"),
        (json.dumps({**SUMMARY, "version": "three"}).encode(), "version"),
        (json.dumps({k: v for k, v in SUMMARY.items() if k != "content"}).encode(), "content"),
    ],
)
async def test_corrupt_summary_is_an_error(tmp_path: Path, body: bytes, problem: str) -> None:
    _write_local(tmp_path, summary_key("test", "acme", "bot", "t1"), body)
    reader = ObjectStoreSummaryReader(open_object_store(f"file://{tmp_path}"))
    with pytest.raises(SummaryUnavailable, match=problem):
        await reader.read(THREAD, "bot")


@pytest.mark.parametrize(
    "url", ["file://relative/dir", "file://host/abs", "s3:///prefix", "gs://bucket/x", "file:///x?y=1"]
)
def test_bad_urls_are_refused(url: str) -> None:
    with pytest.raises(ValueError, match="object store URL"):
        open_object_store(url)


def _s3(endpoint: str) -> S3Settings:
    return S3Settings(
        endpoint=endpoint, access_key_id="test", secret_access_key=SecretStr("test"), allow_http=True
    )


async def test_s3_missing_then_present(
    s3_bucket: str, s3_settings: S3Settings, s3_client: Any, tmp_path: Path
) -> None:
    bucket, client = s3_bucket, s3_client
    settings = Settings(data_dir=tmp_path, object_store_url=f"s3://{bucket}/memstream/prod", s3=s3_settings)
    reader = ObjectStoreSummaryReader.from_settings(settings)
    assert await reader.read(THREAD, "bot") is None
    client.put_object(
        Bucket=bucket,
        Key="memstream/prod/" + summary_key("test", "acme", "bot", "t1"),
        Body=json.dumps(SUMMARY).encode(),
    )
    summary = await reader.read(THREAD, "bot")
    assert summary is not None
    assert (summary.version, summary.last_message_id) == (3, "m-41")


async def test_s3_storage_error_is_summary_unavailable() -> None:
    closed_port = free_port()  # nothing listens there: connection refused
    store = open_object_store("s3://summaries/x", _s3(f"http://127.0.0.1:{closed_port}"), timeout_s=1.0)
    started = time.monotonic()
    with pytest.raises(SummaryUnavailable, match="cannot read summary object test/accounts/acme/agents/bot"):
        await ObjectStoreSummaryReader(store).read(THREAD, "bot")
    assert time.monotonic() - started < 5.0  # bounded retries: the context path does not hang
