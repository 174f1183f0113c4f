"""Build the SlateDB object store (and the DB path inside it) that a journal URL names.

- `file:///abs/dir`: a local directory (created if missing); the journal's files live directly
  in it (`manifest/`, `wal/`, `compacted/`, ...).
- `s3://bucket/prefix`: S3 or an S3-compatible store (MinIO, R2, moto); the journal lives under
  `prefix/` in `bucket`. Credentials and endpoint come from `S3Settings`; anything it leaves
  unset falls back to the standard AWS environment variables (`AWS_ACCESS_KEY_ID`, ...).

A malformed URL is a configuration error: `ValueError` naming the URL and what is wrong.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from slatedb.uniffi import ObjectStore, ObjectStoreBuilder, ObjectStoreType

from core.config import S3Settings


@dataclass(frozen=True)
class JournalStore:
    """An object store plus the path of the journal's DB inside it."""

    store: ObjectStore
    db_path: str


def build_object_store(url: str, s3: S3Settings | None = None) -> JournalStore:
    """The object store for `url` (`file:///abs/dir` or `s3://bucket/prefix`)."""
    parts = urlsplit(url)
    if parts.query or parts.fragment:
        raise ValueError(f"journal URL {url!r} must not carry a query or fragment")
    if parts.scheme == "file":
        return _local_store(url, parts.netloc, unquote(parts.path))
    if parts.scheme == "s3":
        return _s3_store(url, parts.netloc, unquote(parts.path), s3 or S3Settings())
    raise ValueError(f"journal URL {url!r} must start with file:/// or s3://")


def _local_store(url: str, host: str, path: str) -> JournalStore:
    if host not in ("", "localhost"):
        raise ValueError(f"journal URL {url!r} names host {host!r}: use file:///absolute/dir")
    directory = Path(path)
    if not path or not directory.is_absolute():
        raise ValueError(f"journal URL {url!r} must name an absolute directory (file:///abs/dir)")
    directory.mkdir(parents=True, exist_ok=True)
    builder = ObjectStoreBuilder(ObjectStoreType.LOCAL)
    builder.with_config("local_path", str(directory))
    return JournalStore(store=builder.build(), db_path="")


def _s3_store(url: str, bucket: str, path: str, s3: S3Settings) -> JournalStore:
    if not bucket:
        raise ValueError(f"journal URL {url!r} must name a bucket: s3://bucket/prefix")
    builder = ObjectStoreBuilder.from_env(ObjectStoreType.S3)
    config = {"bucket": bucket, **s3.store_config()}
    if s3.allow_http:
        config["allow_http"] = "true"
    for key, value in config.items():
        builder.with_config(key, value)
    return JournalStore(store=builder.build(), db_path=path.strip("/"))
