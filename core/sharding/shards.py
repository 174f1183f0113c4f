"""Which journal shard a thread lives in, and where each shard's journal is.

A deployment with `MEMSTREAM_JOURNAL_SHARDS=N` (`Settings.journal_shards`) has N journals, each
with its own fenced writer, relay and `seq` numbering; a thread lives in exactly one of them for
its whole life, the one `shard_of` names.

`shard_of(environment, account_id, thread_id, shards)` is a compatibility promise: data written by
one release is found by the next only if every release maps every thread to the same shard, so
the function is fixed for good. It is SHA-256 over the three ids, each as a 4-byte big-endian
length followed by its UTF-8 bytes (so no id can run into the next: ("a", "bc") and ("ab", "c")
differ), the first 8 bytes of the digest as a big-endian unsigned integer, modulo `shards`. The
unit tests pin values of it.

`shard_journal_url(url, k)`: shard 0's journal is the configured journal URL itself (a deployment
made before shards existed is shard 0 of 1, its data where it was); shard k >= 1 is a sibling of
it: the URL without its trailing slash, then `-shard-<k>` (`file:///data/journal-shard-2`,
`s3://bucket/journal-shard-2`).
"""

from __future__ import annotations

import hashlib
from urllib.parse import urlsplit

MAX_SHARDS = 256
"""The most journal shards a deployment may have."""


def check_shards(shards: int) -> int:
    """`shards` if it is a shard count (1..`MAX_SHARDS`), else ValueError."""
    if isinstance(shards, bool) or not isinstance(shards, int) or not 1 <= shards <= MAX_SHARDS:
        raise ValueError(f"the journal shard count must be an integer from 1 to {MAX_SHARDS}, not {shards!r}")
    return shards


def check_shard(shard: int, shards: int) -> int:
    """`shard` if it is a shard of `shards` (0..shards-1), else ValueError."""
    check_shards(shards)
    if isinstance(shard, bool) or not isinstance(shard, int) or not 0 <= shard < shards:
        raise ValueError(f"shard {shard!r} is not one of the {shards} journal shards (0..{shards - 1})")
    return shard


def _field(value: str) -> bytes:
    raw = value.encode("utf-8")
    return len(raw).to_bytes(4, "big") + raw


def shard_of(environment: str, account_id: str, thread_id: str, shards: int) -> int:
    """The shard of the thread (environment, account_id, thread_id) among `shards` (module doc)."""
    check_shards(shards)
    if shards == 1:
        return 0
    digest = hashlib.sha256(_field(environment) + _field(account_id) + _field(thread_id)).digest()
    return int.from_bytes(digest[:8], "big") % shards


def shard_journal_url(url: str, shard: int) -> str:
    """The journal URL of `shard` (module doc); ValueError for a URL without a path to put a
    sibling beside (`s3://bucket`, `file:///`): give the journal a directory or prefix of its own."""
    if isinstance(shard, bool) or not isinstance(shard, int) or not 0 <= shard < MAX_SHARDS:
        raise ValueError(f"shard must be an integer from 0 to {MAX_SHARDS - 1}, not {shard!r}")
    if shard == 0:
        return url
    base = url.rstrip("/")
    parts = urlsplit(base)
    if not parts.path.strip("/"):
        raise ValueError(
            f"journal URL {url!r} has no directory or prefix to put the journals of other shards "
            "beside: use e.g. file:///data/journal or s3://bucket/journal"
        )
    return f"{base}-shard-{shard}"
