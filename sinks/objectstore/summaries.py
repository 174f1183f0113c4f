"""A thread's summaries in object storage (obstore): the reader and the versioned writer.

The store is named by `settings.object_store`: `file:///DIR` (a local directory, created when
missing) or `s3://bucket/prefix` (S3 or an S3-compatible server; endpoint and credentials from
`settings.s3`, anything unset there from the standard `AWS_*` environment variables). Keys are
relative to that root.

Layout and versioning (one design, one code path for the local directory and S3)
--------------------------------------------------------------------------------
Per thread, under `{environment}/accounts/{account}/agents/{agent}/threads/{thread}/`:

- `summary.v{N}.json` - version N, immutable, created with put-if-absent (`mode="create"`). Creating
  it is the commit point of version N: the store lets exactly one writer create it, so of writers
  racing for version N exactly one wins. Version objects are never deleted (so "already exists" is
  a permanent answer, and a stalled writer can never re-create an old version).
- `summary.json` - a copy of the latest version, the object the context reader reads first.

`write(new, expected_version=E, floor=F)`: (1) resolve the current version C (highest
`summary.v{N}.json`, or a `summary.json` written before versioning existed) and check C == E and
new.version == max(E, F) + 1 (E = None: C is None; F is 0 unless objects were lost, see below),
else SummaryVersionConflict; (2) create `summary.v{new.version}.json` (put-if-absent; "already
exists" -> SummaryVersionConflict, unless the stored object is exactly `new`: a retried request of
our own); (3) publish the copy to `summary.json`
unless it already shows the same or a newer version, then check whether a newer version appeared
meanwhile and publish that one instead (last-writer-wins on `summary.json` can otherwise leave an
older copy there for a moment).

Why this needs no conditional update of `summary.json` (which the local store does not support):
`summary.json` may lag behind the versions - after a crash between steps 2 and 3, or when two
publishes cross - but readers never trust it alone. `read` takes `summary.json` (version P) and
checks whether `summary.v{P+1}.json` exists (v1 when there is no `summary.json`); when it does, it
lists the thread's versions and returns the highest. Versions are created in order without gaps
(N + 1 is created only after N exists), so "P + 1 is absent" proves P is the latest. Therefore the
visible version never goes backwards and a crash never loses the winner; `current()` (the
writer's resolve) also repairs a lagging `summary.json`. Cost: one extra HEAD per read (the Redis
cache sits in front of it on the context path).

The one gap: when a thread's objects were lost (its folder or the whole store deleted), the next
write continues above the highest version ever written (`floor`, from the durable high-water mark
of `core.summaries.layered.MonotonicSummaryStore`): e.g. v3 is created where nothing is left, so
a version number is never reused and never goes backwards. That write publishes `summary.json`
right after its create; only if that publish fails do readers see no summary until the next
`current()` repairs it.

A missing summary reads as None. Any other storage failure, or an object that is not a valid
summary, raises `SummaryUnavailable` on reads; writes raise `SummaryVersionConflict` or
`SummaryWriteFailed`. Requests are bounded (`timeout_s`, few retries) because reads sit on the
latency path of every turn's context.
"""

from __future__ import annotations

import contextlib
import logging
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

import obstore
from obstore.exceptions import AlreadyExistsError
from obstore.store import LocalStore, S3Store

from core.config import S3Settings, Settings
from core.journal.models import ThreadRef
from core.summaries.models import (
    Summary,
    SummaryUnavailable,
    SummaryVersionConflict,
    SummaryWriteFailed,
    in_force_then,
    parse_summary,
    summary_key,
    summary_version_key,
)

if TYPE_CHECKING:
    from obstore.store import ObjectStore

log = logging.getLogger(__name__)

_VERSION_RE = re.compile(r"/summary\.v([1-9][0-9]*)\.json$")


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


@dataclass(frozen=True)
class _Keys:
    environment: str
    account_id: str
    agent_id: str
    thread_id: str

    @classmethod
    def of(cls, thread: ThreadRef, agent_id: str) -> _Keys:
        return cls(thread.environment, thread.account_id, agent_id, thread.thread_id)

    @property
    def pointer(self) -> str:
        return summary_key(self.environment, self.account_id, self.agent_id, self.thread_id)

    @property
    def folder(self) -> str:
        return self.pointer.rsplit("/", 1)[0]

    def version(self, n: int) -> str:
        return summary_version_key(self.environment, self.account_id, self.agent_id, self.thread_id, n)


class _SummaryObjects:
    """Object-level reads shared by the reader and the writer. Storage errors propagate raw."""

    def __init__(self, store: ObjectStore) -> None:
        self._store = store

    async def _get(self, key: str) -> Summary | None:
        try:
            result = await obstore.get_async(self._store, key)
            raw = bytes(await result.bytes_async())
        except FileNotFoundError:
            return None
        return parse_summary(raw, key)

    async def _exists(self, key: str) -> bool:
        try:
            await obstore.head_async(self._store, key)
        except FileNotFoundError:
            return False
        return True

    async def _highest_version(self, keys: _Keys) -> int | None:
        """The highest N of the thread's `summary.v{N}.json` objects (None when there is none)."""
        listing = await obstore.list_with_delimiter_async(self._store, keys.folder)
        versions = [int(m[1]) for o in listing["objects"] if (m := _VERSION_RE.search("/" + o["path"]))]
        return max(versions, default=None)

    async def _latest_from_versions(self, keys: _Keys) -> Summary | None:
        top = await self._highest_version(keys)
        if top is None:
            return None
        summary = await self._get(keys.version(top))
        if summary is None or summary.version != top:
            raise SummaryUnavailable(
                f"summary object {keys.version(top)} is corrupt: it holds version "
                f"{None if summary is None else summary.version}, not {top}"
            )
        return summary

    async def _read_visible(self, keys: _Keys) -> Summary | None:
        """`summary.json`, or the highest version when `summary.json` lags (see the module doc)."""
        pointer = await self._get(keys.pointer)
        following = keys.version(pointer.version + 1 if pointer is not None else 1)
        if not await self._exists(following):
            return pointer
        latest = await self._latest_from_versions(keys)
        if latest is None or (pointer is not None and pointer.version > latest.version):
            return pointer
        return latest


class ObjectStoreSummaryReader(_SummaryObjects):
    """`core.summaries.models.SummaryReader` over an obstore store."""

    @classmethod
    def from_settings(cls, settings: Settings) -> ObjectStoreSummaryReader:
        return cls(open_object_store(settings.object_store, settings.s3))

    async def read(self, thread: ThreadRef, agent_id: str) -> Summary | None:
        keys = _Keys.of(thread, agent_id)
        try:
            return await self._read_visible(keys)
        except SummaryUnavailable:
            raise
        except Exception as exc:
            raise SummaryUnavailable(
                f"cannot read summary object {keys.pointer}: {type(exc).__name__}: {exc}"
            ) from exc

    async def as_of(
        self, thread: ThreadRef, agent_id: str, *, last_offset: int, written_before: datetime | None
    ) -> Summary | None:
        """`SummaryHistory.as_of`: a binary search over the thread's version objects (versions are
        written in order, so `in_force_then` holds up to some version and not after it): about
        log2(versions) reads after one listing. A thread summarized before versioning existed has
        only `summary.json`, which is judged alone."""
        keys = _Keys.of(thread, agent_id)
        try:
            listing = await obstore.list_with_delimiter_async(self._store, keys.folder)
            versions = sorted(
                int(m[1]) for o in listing["objects"] if (m := _VERSION_RE.search("/" + o["path"]))
            )
            if not versions:
                legacy = await self._get(keys.pointer)
                fits = legacy is not None and in_force_then(legacy, last_offset, written_before)
                return legacy if fits else None
            best: Summary | None = None
            low, high = 0, len(versions)
            while low < high:
                middle = (low + high) // 2
                summary = await self._get(keys.version(versions[middle]))
                if summary is not None and in_force_then(summary, last_offset, written_before):
                    best, low = summary, middle + 1
                else:
                    high = middle
            return best
        except SummaryUnavailable:
            raise
        except Exception as exc:
            raise SummaryUnavailable(
                f"cannot read the summary versions under {keys.folder}: {type(exc).__name__}: {exc}"
            ) from exc

    async def versions(self, thread: ThreadRef, agent_id: str) -> list[Summary]:
        """Every kept version of the thread's summary, oldest first (an account export): the
        `summary.v{N}.json` objects, or the lone `summary.json` of a thread summarized before
        versioning existed; [] when there is none. Raises SummaryUnavailable."""
        keys = _Keys.of(thread, agent_id)
        try:
            listing = await obstore.list_with_delimiter_async(self._store, keys.folder)
            numbers = sorted(
                int(m[1]) for o in listing["objects"] if (m := _VERSION_RE.search("/" + o["path"]))
            )
            if not numbers:
                legacy = await self._get(keys.pointer)
                return [legacy] if legacy is not None else []
            found = [await self._get(keys.version(n)) for n in numbers]
        except SummaryUnavailable:
            raise
        except Exception as exc:
            raise SummaryUnavailable(
                f"cannot read the summary versions under {keys.folder}: {type(exc).__name__}: {exc}"
            ) from exc
        for number, summary in zip(numbers, found, strict=True):
            if summary is None or summary.version != number:
                raise SummaryUnavailable(f"summary object {keys.version(number)} is missing or corrupt")
        return [s for s in found if s is not None]


class ObjectStoreSummaryWriter(ObjectStoreSummaryReader):
    """`core.summaries.models.SummaryWriter` (and `SummaryReader`) over an obstore store: versioned,
    optimistic writes as described in the module doc."""

    @classmethod
    def from_settings(cls, settings: Settings) -> ObjectStoreSummaryWriter:
        return cls(open_object_store(settings.object_store, settings.s3))

    async def delete_thread(self, thread: ThreadRef, agent_id: str) -> int:
        """Delete every object of the agent's summaries of `thread` (the pointer and every version: a
        thread deletion); the count deleted. Idempotent."""
        keys = _Keys.of(thread, agent_id)
        listing = await obstore.list_with_delimiter_async(self._store, keys.folder)
        paths = [o["path"] for o in listing["objects"]]
        for path in paths:
            with contextlib.suppress(FileNotFoundError):
                await obstore.delete_async(self._store, path)
        return len(paths)

    async def current(self, thread: ThreadRef, agent_id: str) -> Summary | None:
        keys = _Keys.of(thread, agent_id)
        try:
            latest, pointer_version = await self._resolve(keys)
        except SummaryUnavailable:
            raise
        except Exception as exc:
            raise SummaryUnavailable(
                f"cannot read summary objects of {keys.folder}: {type(exc).__name__}: {exc}"
            ) from exc
        if latest is not None and (pointer_version is None or pointer_version < latest.version):
            await self._publish(keys, latest)  # repair a summary.json left behind (crash, crossing)
        return latest

    async def write(
        self,
        thread: ThreadRef,
        agent_id: str,
        new: Summary,
        *,
        expected_version: int | None,
        floor: int = 0,
    ) -> Summary:
        keys = _Keys.of(thread, agent_id)
        try:
            latest, _ = await self._resolve(keys)
        except Exception as exc:
            detail = exc.message if isinstance(exc, SummaryUnavailable) else f"{type(exc).__name__}: {exc}"
            raise SummaryWriteFailed(f"cannot read the current summary of {keys.folder}: {detail}") from exc
        current = latest.version if latest is not None else None
        if latest is not None and latest == new:  # the same write again (unknown outcome retried)
            await self._publish(keys, new)
            return new
        wanted = max(expected_version or 0, floor) + 1
        if current != expected_version or new.version != wanted:
            raise SummaryVersionConflict(
                f"summary of {keys.folder}: expected version {expected_version}, stored version "
                f"{current}, new version {new.version} (must be {wanted})",
                current_version=current,
            )
        await self._create(keys, new)
        await self._publish(keys, new)
        return new

    async def _resolve(self, keys: _Keys) -> tuple[Summary | None, int | None]:
        """(the latest summary, the version `summary.json` shows). A `summary.json` newer than every
        version object (written before versioning) counts as the latest."""
        latest = await self._latest_from_versions(keys)
        try:
            pointer = await self._get(keys.pointer)
        except SummaryUnavailable:
            if latest is None:
                raise
            pointer = None  # a corrupt copy next to valid versions: repaired by the next publish
        if pointer is not None and (latest is None or pointer.version > latest.version):
            return pointer, pointer.version
        return latest, pointer.version if pointer is not None else None

    async def _create(self, keys: _Keys, new: Summary) -> None:
        """Step 2: create `summary.v{N}.json` (the commit point)."""
        key = keys.version(new.version)
        try:
            await obstore.put_async(self._store, key, new.model_dump_json().encode(), mode="create")
        except AlreadyExistsError:
            try:
                stored = await self._get(key)
            except Exception:
                stored = None
            if stored == new:
                return  # our own earlier attempt (e.g. a request retried after a lost response)
            raise SummaryVersionConflict(
                f"summary of {keys.folder}: version {new.version} was written by another writer",
                current_version=new.version,
            ) from None
        except Exception as exc:
            raise SummaryWriteFailed(
                f"cannot write summary object {key}: {type(exc).__name__}: {exc}"
            ) from exc

    async def _publish(self, keys: _Keys, summary: Summary) -> None:
        """Step 3: copy `summary` to `summary.json` unless it shows the same or a newer version.

        Best effort: version N is already committed, and readers resolve a lagging copy.
        """
        try:
            try:
                shown = await self._get(keys.pointer)
            except SummaryUnavailable:
                shown = None  # corrupt copy: overwrite it
            if shown is not None and shown.version >= summary.version:
                return
            await obstore.put_async(self._store, keys.pointer, summary.model_dump_json().encode())
            if await self._exists(keys.version(summary.version + 1)):
                # A newer version won while we published: our copy may have overwritten its copy.
                newer = await self._latest_from_versions(keys)
                if newer is not None and newer.version > summary.version:
                    await obstore.put_async(self._store, keys.pointer, newer.model_dump_json().encode())
        except Exception as exc:
            log.warning(
                "summary version %d of %s is committed but %s was not updated (%s: %s); "
                "readers resolve the latest version",
                summary.version,
                keys.folder,
                keys.pointer,
                type(exc).__name__,
                exc,
            )
