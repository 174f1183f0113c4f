"""The versioned summary writer's objects on real stores: a local directory and S3 (moto server).
The `SummaryStore` contract it shares with the fake is tests/core/stores/test_summaries.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import obstore
import pytest
from pydantic import SecretStr

from core.config import S3Settings
from core.summaries.models import (
    SummaryVersionConflict,
    SummaryWriteFailed,
    summary_key,
    summary_version_key,
)
from memstream.embedded.process import free_port
from sinks.objectstore.summaries import ObjectStoreSummaryReader, ObjectStoreSummaryWriter, open_object_store
from tests.summary_builders import THREAD, make

POINTER = summary_key("test", "acme", "bot", "t1")


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.engine)])  # s3: a moto server
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "local":
        return open_object_store(f"file://{tmp_path / 'objects'}")
    bucket: str = request.getfixturevalue("s3_bucket")
    s3: S3Settings = request.getfixturevalue("s3_settings")
    return open_object_store(f"s3://{bucket}/memstream", s3)


@pytest.fixture
def writer(store: Any) -> ObjectStoreSummaryWriter:
    return ObjectStoreSummaryWriter(store)


@pytest.fixture
def reader(store: Any) -> ObjectStoreSummaryReader:
    return ObjectStoreSummaryReader(store)


async def keys_of(store: Any, folder: str = "test/accounts/acme/agents/bot/threads/t1") -> list[str]:
    listing = await obstore.list_with_delimiter_async(store, folder)
    return sorted(o["path"].rsplit("/", 1)[1] for o in listing["objects"])


async def raw(store: Any, key: str) -> dict[str, Any]:
    result = await obstore.get_async(store, key)
    loaded: dict[str, Any] = json.loads(bytes(await result.bytes_async()))
    return loaded


async def test_every_version_is_an_object_and_summary_json_the_latest(
    writer: ObjectStoreSummaryWriter, store: Any
) -> None:
    await writer.write(THREAD, "bot", make(1), expected_version=None)
    await writer.write(THREAD, "bot", make(2), expected_version=1)
    assert await keys_of(store) == ["summary.json", "summary.v1.json", "summary.v2.json"]
    # summary.json is the canonical copy of the latest version, readable on its own
    assert (await raw(store, POINTER))["version"] == 2
    assert (await raw(store, summary_version_key("test", "acme", "bot", "t1", 1)))[
        "content"
    ] == "summary version 1"
    # a retried write and a conflicting one add no object
    assert await writer.write(THREAD, "bot", make(2), expected_version=1) == make(2)
    with pytest.raises(SummaryVersionConflict):
        await writer.write(THREAD, "bot", make(2, "other"), expected_version=1)
    assert await keys_of(store) == ["summary.json", "summary.v1.json", "summary.v2.json"]


@pytest.mark.parametrize(
    ("expected", "version"),
    [(None, 3), (1, 2), (2, 2), (5, 6)],  # stale "none yet", stale version, not + 1, ahead
)
async def test_conflicts_leave_every_object_alone(
    writer: ObjectStoreSummaryWriter, store: Any, expected: int | None, version: int
) -> None:
    await writer.write(THREAD, "bot", make(1), expected_version=None)
    await writer.write(THREAD, "bot", make(2), expected_version=1)
    before = (await keys_of(store), await raw(store, POINTER))
    with pytest.raises(SummaryVersionConflict, match="expected version"):
        await writer.write(THREAD, "bot", make(version, "rogue"), expected_version=expected)
    assert (await keys_of(store), await raw(store, POINTER)) == before


async def test_crash_after_commit_before_publish(
    writer: ObjectStoreSummaryWriter, reader: ObjectStoreSummaryReader, store: Any
) -> None:
    await writer.write(THREAD, "bot", make(1), expected_version=None)
    # a writer won version 2 (step 2) and crashed before updating summary.json (step 3)
    await obstore.put_async(
        store,
        summary_version_key("test", "acme", "bot", "t1", 2),
        make(2).model_dump_json().encode(),
        mode="create",
    )
    assert (await raw(store, POINTER))["version"] == 1
    assert await reader.read(THREAD, "bot") == make(2)  # the winner is visible, not lost
    with pytest.raises(SummaryVersionConflict) as caught:
        await writer.write(THREAD, "bot", make(2, "late"), expected_version=1)
    assert caught.value.current_version == 2
    assert await writer.current(THREAD, "bot") == make(2)
    assert (await raw(store, POINTER))["version"] == 2  # current() repaired the copy
    await writer.write(THREAD, "bot", make(3), expected_version=2)
    assert await reader.read(THREAD, "bot") == make(3)


async def test_crash_before_the_first_publish(
    writer: ObjectStoreSummaryWriter, reader: ObjectStoreSummaryReader, store: Any
) -> None:
    await obstore.put_async(
        store,
        summary_version_key("test", "acme", "bot", "t1", 1),
        make(1).model_dump_json().encode(),
        mode="create",
    )
    assert await reader.read(THREAD, "bot") == make(1)
    with pytest.raises(SummaryVersionConflict):
        await writer.write(THREAD, "bot", make(1, "other"), expected_version=None)


async def test_an_older_copy_in_summary_json_is_never_shown(
    writer: ObjectStoreSummaryWriter, reader: ObjectStoreSummaryReader, store: Any
) -> None:
    for version in (1, 2, 3):
        await writer.write(THREAD, "bot", make(version), expected_version=version - 1 or None)
    # two publishes crossed: an older copy landed last
    await obstore.put_async(store, POINTER, make(1).model_dump_json().encode())
    assert await reader.read(THREAD, "bot") == make(3)
    assert await writer.current(THREAD, "bot") == make(3)
    assert (await raw(store, POINTER))["version"] == 3


async def test_summary_json_written_before_versioning_counts(
    writer: ObjectStoreSummaryWriter, store: Any
) -> None:
    await obstore.put_async(store, POINTER, make(3).model_dump_json().encode())
    assert await writer.current(THREAD, "bot") == make(3)
    with pytest.raises(SummaryVersionConflict) as caught:
        await writer.write(THREAD, "bot", make(1), expected_version=None)
    assert caught.value.current_version == 3
    await writer.write(THREAD, "bot", make(4), expected_version=3)
    assert await writer.current(THREAD, "bot") == make(4)
    assert await keys_of(store) == ["summary.json", "summary.v4.json"]


async def test_versions_lists_every_kept_version_oldest_first(
    writer: ObjectStoreSummaryWriter, reader: ObjectStoreSummaryReader, store: Any
) -> None:
    assert await reader.versions(THREAD, "bot") == []
    await obstore.put_async(store, POINTER, make(3).model_dump_json().encode())  # before versioning
    assert await reader.versions(THREAD, "bot") == [make(3)]
    await writer.write(THREAD, "bot", make(4), expected_version=3)
    await writer.write(THREAD, "bot", make(5), expected_version=4)
    await writer.write(THREAD, "bot", make(12), expected_version=5, floor=11)  # above lost objects
    assert await reader.versions(THREAD, "bot") == [make(4), make(5), make(12)]
    assert await reader.versions(THREAD, "other-bot") == []


async def test_store_down_is_write_failed() -> None:
    closed = free_port()
    s3 = S3Settings(
        endpoint=f"http://127.0.0.1:{closed}",
        access_key_id="x",
        secret_access_key=SecretStr("x"),
        allow_http=True,
    )
    writer = ObjectStoreSummaryWriter(open_object_store("s3://summaries/x", s3, timeout_s=1.0))
    with pytest.raises(SummaryWriteFailed, match="cannot read the current summary"):
        await writer.write(THREAD, "bot", make(1), expected_version=None)


async def test_a_write_above_the_floor_starts_the_objects_again(
    writer: ObjectStoreSummaryWriter, store: Any
) -> None:
    with pytest.raises(SummaryVersionConflict, match=r"must be 3"):
        await writer.write(THREAD, "bot", make(1), expected_version=None, floor=2)
    assert await keys_of(store) == []
    await writer.write(THREAD, "bot", make(3), expected_version=None, floor=2)
    assert await keys_of(store) == ["summary.json", "summary.v3.json"]
