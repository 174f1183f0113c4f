"""Which journal shard a SlateDB journal is, recorded in it (`keys.LAYOUT_KEY`), and the check
that a writer opens the shard it was configured for.

A journal records `{shard}/{shards}` when its writer first opens it with a layout
(`SlateJournal.open(url, shard=k, shards=n)`, or `record_layout()` after an open with
`record=False`: a node opening several shards records them only once every one opened, so a failed
first start does not pin a count). A journal without the record that already holds
data was written before shards existed: it is shard 0 of 1, and the record is added. On every
later open the record must equal the configured layout, else `JournalShardsMismatch` names both
and what to do: the shard count cannot change (a thread's shard is `shard_of(..., shards)`, so
another count would look for most threads in the wrong journal), and a journal URL must not
point at another shard's journal.
"""

from __future__ import annotations

import asyncio
from typing import Any

from core.errors import JournalShardsMismatch, JournalUnavailable
from core.sharding.shards import check_shard
from sinks.slatedb import keys
from sinks.slatedb.binding import ALL, scan_options

LATEST_ASC = scan_options(False)
RESHARD_HINT = (
    "Resharding is not supported: set MEMSTREAM_JOURNAL_SHARDS={recorded} again. To use another count, "
    "start a new deployment (new journals, Postgres database and topics) with it and move every "
    "account over with `memstream export` and `memstream import`."
)


def parse_layout(url: str, value: bytes) -> tuple[int, int]:
    """(shard, shards) of a stored layout record; JournalUnavailable when it is malformed."""
    try:
        shard_text, shards_text = value.decode("ascii").split("/")
        shard, shards = int(shard_text), int(shards_text)
        check_shard(shard, shards)
    except ValueError as exc:
        raise JournalUnavailable(f"journal at {url}: unreadable shard record {value!r}: {exc}") from exc
    return shard, shards


def layout_value(shard: int, shards: int) -> bytes:
    return f"{check_shard(shard, shards)}/{shards}".encode("ascii")


async def recorded_layout(db: Any, url: str) -> tuple[tuple[int, int] | None, bool]:
    """The layout of the journal: what it records, else (0, 1) for a journal with data (written
    before shards existed), else None (empty); and whether it was recorded. Reads the latest writes."""
    value = await db.get(keys.LAYOUT_KEY)
    if value is not None:
        return parse_layout(url, value), True
    iterator = await db.scan_prefix_with_options(b"", ALL, LATEST_ASC)
    return (None if await iterator.next() is None else (0, 1)), False


async def check_layout(db: Any, url: str, shard: int, shards: int) -> bool:
    """Raise JournalShardsMismatch unless the journal is `shard` of `shards` (module doc); True when
    the journal has no record of it yet (`record_layout` writes it)."""
    check_shard(shard, shards)
    recorded, stored = await recorded_layout(db, url)
    if recorded is not None and recorded != (shard, shards):
        was_shard, was_shards = recorded
        if was_shards != shards:
            raise JournalShardsMismatch(
                f"the journal at {url} belongs to a deployment of {was_shards} journal shard(s) "
                f"(MEMSTREAM_JOURNAL_SHARDS={was_shards}), and this node is configured with {shards}. "
                + RESHARD_HINT.format(recorded=was_shards)
            )
        raise JournalShardsMismatch(
            f"the journal at {url} is shard {was_shard} of {was_shards}, not shard {shard}: every shard "
            "k >= 1 lives beside the journal URL of shard 0, as `<url>-shard-<k>`; check "
            "MEMSTREAM_JOURNAL_URL"
        )
    return not stored


async def record_layout(db: Any, shard: int, shards: int, write_timeout_s: float) -> None:
    """Record that the journal is `shard` of `shards`, durably."""
    handle = await db.put(keys.LAYOUT_KEY, layout_value(shard, shards))
    await asyncio.wait_for(handle.await_durable(), write_timeout_s)
