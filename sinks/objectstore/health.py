"""Readiness of the object store (`settings.object_store`): does its root answer a listing?

Why a listing: obstore reports a missing object and a missing S3 bucket alike (404 ->
FileNotFoundError on `get`/`head`), so without a check a missing bucket reads as "no summary" on
every context and summary writes fail late. A LIST of the store's root (one request, first page
only) succeeds on an existing bucket, empty or not, and fails on a missing one (S3 answers
`NoSuchBucket`), on refused credentials or on an unreachable endpoint.

A local directory (`file:///DIR`) is checked on the file system instead, and created again when it
is missing (e.g. deleted while the node runs): summaries lost with it are rebuilt from the journal
at the next compaction, with versions above the lost ones. An S3 bucket is never created, only
reported.

`ObjectStoreProbe.check()` raises `ObjectStoreNotReady` with a message that names the bucket and
what to do; `/readyz` reports it and the node logs it once at start.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

import obstore

from core.config import Settings, mask_url
from sinks.objectstore.summaries import open_object_store

if TYPE_CHECKING:
    from obstore.store import ObjectStore

log = logging.getLogger(__name__)


def _writable_dir(path: str) -> bool:
    """Whether `path` is a writable directory, creating it (and its parents, mode 0700) when it is
    missing."""
    if not os.path.isdir(path):
        try:
            os.makedirs(path, mode=0o700, exist_ok=True)
        except OSError as exc:
            log.warning("cannot create the object store directory %s: %s", path, exc)
            return False
        log.warning("the object store directory %s was missing: created it again", path)
    return os.path.isdir(path) and os.access(path, os.W_OK)


class ObjectStoreNotReady(Exception):
    """The object store cannot serve summaries; `message` says why and what to do."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ObjectStoreProbe:
    """Checks that the store rooted at `url` answers (see the module doc). Does no I/O until `check`."""

    def __init__(self, store: ObjectStore, url: str) -> None:
        self._store = store
        self._url = url
        parts = urlsplit(url)
        self.bucket: str | None = parts.netloc if parts.scheme == "s3" else None

    @classmethod
    def from_settings(cls, settings: Settings, *, timeout_s: float = 5.0) -> ObjectStoreProbe:
        url = settings.object_store
        return cls(open_object_store(url, settings.s3, timeout_s=timeout_s), url)

    async def check(self) -> None:
        """Returns when the root of the store can be listed; raises `ObjectStoreNotReady` otherwise.
        A local directory store is checked on the file system (it exists - it is created again
        when missing - and is writable) without an obstore call."""
        parts = urlsplit(self._url)
        if parts.scheme == "file":
            root = unquote(parts.path)
            if not await asyncio.to_thread(_writable_dir, root):
                raise ObjectStoreNotReady(
                    f"object store {mask_url(self._url)}: {root} is not a writable directory and cannot "
                    "be created (fix its permissions or point MEMSTREAM_OBJECT_STORE_URL elsewhere)"
                )
            return
        try:
            async for _ in obstore.list(self._store, chunk_size=1):
                break
        except Exception as exc:
            raise ObjectStoreNotReady(self._explain(exc)) from exc

    async def log_if_not_ready(self, timeout_s: float = 10.0) -> bool:
        """`check` (at most `timeout_s`), logging an error that says what to do instead of raising;
        True when ready. For a process's start: it goes on, and `/readyz` keeps reporting it."""
        try:
            await asyncio.wait_for(self.check(), timeout=timeout_s)
        except (ObjectStoreNotReady, TimeoutError) as exc:
            reason = (
                exc.message
                if isinstance(exc, ObjectStoreNotReady)
                else (f"object store {mask_url(self._url)} did not answer within {timeout_s} s")
            )
            log.error("%s; /readyz reports not ready until this is fixed", reason)
            return False
        return True

    def _explain(self, exc: Exception) -> str:
        shown = mask_url(self._url)
        detail = f"{type(exc).__name__}: {exc}".split("\n", 1)[0]
        if self.bucket is not None and "NoSuchBucket" in str(exc):
            return (
                f"the S3 bucket {self.bucket!r} of object store {shown} does not exist: create it "
                f"(e.g. `aws s3 mb s3://{self.bucket}`) or point MEMSTREAM_OBJECT_STORE_URL at an "
                "existing bucket"
            )
        if self.bucket is not None:
            return (
                f"the S3 bucket {self.bucket!r} of object store {shown} cannot be listed (check the "
                f"endpoint and credentials, MEMSTREAM_S3__*): {detail}"
            )
        return f"object store {shown} cannot be listed: {detail}"
