"""Journal URLs: local directories and a real S3 API (moto's server on 127.0.0.1)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from core.config import S3Settings
from core.errors import JournalFenced
from sinks.slatedb.journal import SlateJournal
from sinks.slatedb.objectstore import build_object_store

from .helpers import thread, user


@pytest.fixture
def s3(s3_bucket: str, s3_settings: S3Settings) -> tuple[str, S3Settings]:
    """A fresh bucket and settings to reach it."""
    return s3_bucket, s3_settings


async def test_append_reopen_and_read_through_s3(s3: tuple[str, S3Settings], s3_client: Any) -> None:
    bucket, settings = s3
    url = f"s3://{bucket}/journal"
    journal = await SlateJournal.open(url, s3=settings)
    written = await journal.append(thread(), "a", None, [user("on s3", "m1"), user("second")])
    await journal.set_cursor("relay", 1)
    await journal.close()

    reopened = await SlateJournal.open(url, s3=settings)
    try:
        assert await reopened.last(thread(), 10) == written
        assert await reopened.read_from_seq(0, 10) == written
        assert await reopened.get_cursor("relay") == 1
        assert (await reopened.append(thread(), "a", None, [user("third")]))[0].seq == 3
    finally:
        await reopened.close()

    keys = s3_client.list_objects_v2(Bucket=bucket)["Contents"]
    assert keys and all(obj["Key"].startswith("journal/") for obj in keys)


async def test_fencing_through_s3(s3: tuple[str, S3Settings]) -> None:
    bucket, settings = s3
    url = f"s3://{bucket}/fenced"
    first = await SlateJournal.open(url, s3=settings)
    await first.append(thread(), "a", None, [user("first")])
    second = await SlateJournal.open(url, s3=settings)
    try:
        with pytest.raises(JournalFenced):
            await first.append(thread(), "a", None, [user("lost")])
        assert [m.content for m in await second.after(thread(), -1)] == ["first"]
        await first.close()
    finally:
        await second.close()


def test_local_url_creates_the_directory(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b"
    assert build_object_store(f"file://{target}").db_path == ""
    assert target.is_dir()


def test_s3_url_gives_the_prefix_as_db_path() -> None:
    assert build_object_store("s3://bucket/some/prefix/").db_path == "some/prefix"


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("relative/dir", "must start with"),
        ("http://example.com/x", "must start with"),
        ("file://relative/dir", "names host"),
        ("file:///tmp/x?mode=1", "query"),
        ("s3:///prefix", "must name a bucket"),
    ],
)
def test_bad_urls_are_refused(url: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        build_object_store(url)
