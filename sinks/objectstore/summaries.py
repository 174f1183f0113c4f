"""Read a thread's `summary.json` from object storage (obstore).

The store is named by `settings.object_store`: `file:///DIR` (a local directory, created when
missing) or `s3://bucket/prefix` (S3 or an S3-compatible server; endpoint and credentials from
`settings.s3`, anything unset there from the standard `AWS_*` environment variables). Keys are
`memstream.summaries.summary_key(...)` relative to that root.

A missing object means "no summary yet" (None). Any other storage failure, or an object that is
not a valid summary, raises `SummaryUnavailable`. Requests are bounded (`timeout_s`, few retries)
because this read sits on the latency path of every turn's context.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

import obstore
from obstore.store import LocalStore, S3Store

from memstream.config import S3Settings, Settings
from memstream.journal.models import ThreadRef
from memstream.summaries import Summary, SummaryUnavailable, parse_summary, summary_key

if TYPE_CHECKING:
    from obstore.store import ObjectStore


def open_object_store(url: str, s3: S3Settings | None = None, *, timeout_s: float = 5.0) -> ObjectStore:
    """The obstore store rooted at `url` (`file:///abs/dir` or `s3://bucket/prefix`).

    A malformed URL raises ValueError naming the URL and what is wrong.
    """
    parts = urlsplit(url)
    if parts.query or parts.fragment:
        raise ValueError(f"object store URL {url!r} must not carry a query or fragment")
    path = unquote(parts.path)
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost") or not path or not Path(path).is_absolute():
            raise ValueError(f"object store URL {url!r} must name an absolute directory: file:///abs/dir")
        return LocalStore(path, mkdir=True)
    if parts.scheme == "s3":
        if not parts.netloc:
            raise ValueError(f"object store URL {url!r} must name a bucket: s3://bucket/prefix")
        s3 = s3 or S3Settings()
        return S3Store(
            parts.netloc,
            prefix=path.strip("/") or None,
            config=s3.store_config(),  # type: ignore[arg-type]
            client_options={"allow_http": s3.allow_http, "timeout": timedelta(seconds=timeout_s)},
            retry_config={"max_retries": 2, "retry_timeout": timedelta(seconds=timeout_s)},
        )
    raise ValueError(f"object store URL {url!r} must start with file:/// or s3://")


class ObjectStoreSummaryReader:
    """`memstream.summaries.SummaryReader` over an obstore store."""

    def __init__(self, store: ObjectStore) -> None:
        self._store = store

    @classmethod
    def from_settings(cls, settings: Settings) -> ObjectStoreSummaryReader:
        return cls(open_object_store(settings.object_store, settings.s3))

    async def read(self, thread: ThreadRef, agent_id: str) -> Summary | None:
        key = summary_key(thread.account_id, agent_id, thread.thread_id)
        try:
            result = await obstore.get_async(self._store, key)
            raw = bytes(await result.bytes_async())
        except FileNotFoundError:
            return None
        except Exception as exc:
            raise SummaryUnavailable(
                f"cannot read summary object {key}: {type(exc).__name__}: {exc}"
            ) from exc
        return parse_summary(raw, key)
