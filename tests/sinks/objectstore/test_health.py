"""ObjectStoreProbe against a real S3 API (moto's server) and a local directory."""

from __future__ import annotations

import logging
import shutil
import uuid
from pathlib import Path
from typing import Any

import obstore
import pytest
from pydantic import SecretStr

from core.config import S3Settings, Settings
from memstream.embedded.process import free_port
from sinks.objectstore.health import ObjectStoreNotReady, ObjectStoreProbe
from sinks.objectstore.summaries import open_object_store


def _settings(tmp_path: Path, url: str, s3: S3Settings) -> Settings:
    return Settings(data_dir=tmp_path, object_store_url=url, s3=s3)


async def test_existing_bucket_is_ready_empty_or_not(
    tmp_path: Path, s3_settings: S3Settings, s3_bucket: str, s3_client: Any
) -> None:
    probe = ObjectStoreProbe.from_settings(_settings(tmp_path, f"s3://{s3_bucket}/memstream", s3_settings))
    assert probe.bucket == s3_bucket
    await probe.check()  # empty bucket
    s3_client.put_object(Bucket=s3_bucket, Key="memstream/test/x.json", Body=b"{}")
    await probe.check()
    assert await probe.log_if_not_ready() is True


async def test_missing_bucket_is_named_and_distinct_from_a_missing_key(
    tmp_path: Path, s3_settings: S3Settings, caplog: pytest.LogCaptureFixture
) -> None:
    bucket = f"absent-{uuid.uuid4().hex[:8]}"
    url = f"s3://{bucket}/memstream"
    # What the probe exists for: the summary reader alone cannot tell a missing bucket from a
    # thread without a summary.
    store = open_object_store(url, s3_settings)
    with pytest.raises(FileNotFoundError):
        await obstore.head_async(store, "test/accounts/acme/agents/bot/threads/t/summary.json")

    probe = ObjectStoreProbe.from_settings(_settings(tmp_path, url, s3_settings))
    with pytest.raises(ObjectStoreNotReady) as raised:
        await probe.check()
    message = raised.value.message
    assert f"S3 bucket {bucket!r}" in message and "does not exist" in message
    assert f"aws s3 mb s3://{bucket}" in message
    with caplog.at_level(logging.ERROR, logger="sinks.objectstore.health"):
        assert await probe.log_if_not_ready() is False
    assert any(bucket in r.getMessage() and r.levelno == logging.ERROR for r in caplog.records)


async def test_bucket_created_later_becomes_ready(
    tmp_path: Path, s3_settings: S3Settings, s3_client: Any
) -> None:
    bucket = f"late-{uuid.uuid4().hex[:8]}"
    probe = ObjectStoreProbe.from_settings(_settings(tmp_path, f"s3://{bucket}", s3_settings))
    with pytest.raises(ObjectStoreNotReady):
        await probe.check()
    s3_client.create_bucket(Bucket=bucket)
    await probe.check()


async def test_unreachable_endpoint_is_not_ready(tmp_path: Path) -> None:
    s3 = S3Settings(
        endpoint=f"http://127.0.0.1:{free_port()}",  # nothing listens there
        access_key_id="test",
        secret_access_key=SecretStr("test"),
        allow_http=True,
    )
    probe = ObjectStoreProbe.from_settings(_settings(tmp_path, "s3://some-bucket/p", s3), timeout_s=1.0)
    with pytest.raises(ObjectStoreNotReady) as raised:
        await probe.check()
    assert "'some-bucket'" in raised.value.message and "cannot be listed" in raised.value.message


async def test_local_directory_is_ready(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)  # default: file://DATA_DIR/objects
    probe = ObjectStoreProbe.from_settings(settings)
    assert probe.bucket is None
    await probe.check()


async def test_local_directory_deleted_while_running_is_created_again(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    probe = ObjectStoreProbe.from_settings(settings)  # creates the directory
    shutil.rmtree(tmp_path / "objects")
    await probe.check()  # every check looks again, and recreates the folder
    assert (tmp_path / "objects").is_dir()
    await probe.check()


async def test_local_directory_that_cannot_be_created_is_not_ready(tmp_path: Path) -> None:
    probe = ObjectStoreProbe.from_settings(
        Settings(data_dir=tmp_path, object_store_url=f"file://{tmp_path}/parent/objects")
    )
    shutil.rmtree(tmp_path / "parent")
    (tmp_path / "parent").write_text("a file where the folder's parent was")
    with pytest.raises(ObjectStoreNotReady, match="is not a writable directory and cannot be created"):
        await probe.check()
