"""The journal's reads, shared by the writer (`sinks.slatedb.journal.SlateJournal`) and the
read-only view of other processes (`sinks.slatedb.reader.SlateJournalReader`).

Each takes the SlateDB handle (a `Db` or a `DbReader`: both scan and get alike) and reads durable
data only; the caller wraps the call in its own storage-error mapping. Arguments are checked before
any I/O (`InvalidInput`, naming the argument).
"""

from __future__ import annotations

import asyncio
from typing import Any

from slatedb.uniffi import KeyRange, KeyValue

from core.errors import InvalidInput, JournalUnavailable
from core.journal.models import Message, ThreadRef
from sinks.slatedb import keys
from sinks.slatedb.binding import ALL, DURABLE_ASC, DURABLE_DESC, READ, take


def check_count(value: int, name: str) -> None:
    """InvalidInput unless `value` is an integer from 0 to `keys.MAX_NUMBER`."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= keys.MAX_NUMBER:
        raise InvalidInput(f"{name} must be an integer from 0 to {keys.MAX_NUMBER}", field=name)


def check_offset(offset: int) -> None:
    """InvalidInput unless `offset` is -1 (the start) or an offset."""
    if isinstance(offset, bool) or not isinstance(offset, int) or not -1 <= offset <= keys.MAX_NUMBER:
        raise InvalidInput(f"offset must be an integer from -1 to {keys.MAX_NUMBER}", field="offset")


async def last_rows(db: Any, thread: ThreadRef, n: int) -> list[KeyValue]:
    """The last `n` durable rows of a thread, newest first."""
    iterator = await db.scan_prefix_with_options(keys.thread_prefix(thread), ALL, DURABLE_DESC)
    return await take(iterator, n)


async def messages_after(db: Any, url: str, thread: ThreadRef, offset: int, limit: int) -> list[Message]:
    """Durable messages of a thread with offset > `offset` (-1: from the start), oldest first, at
    most `limit` (checked: `check_offset`, `check_count`)."""
    check_count(limit, "limit")
    check_offset(offset)
    if limit == 0:
        return []
    start = None if offset < 0 else keys.offset_suffix(offset)
    subrange = KeyRange(start=start, start_inclusive=False, end=None, end_inclusive=False)
    iterator = await db.scan_prefix_with_options(keys.thread_prefix(thread), subrange, DURABLE_ASC)
    rows = await take(iterator, limit)
    return [keys.parse_row(url, row.key, row.value) for row in rows]


async def messages_from_seq(db: Any, url: str, after_seq: int, limit: int) -> list[Message]:
    """Durable messages with seq > `after_seq`, in seq order, at most `limit` (arguments checked
    by the caller); JournalUnavailable when the seq index points to a missing row."""
    if limit == 0:
        return []
    subrange = KeyRange(
        start=keys.seq_suffix(after_seq), start_inclusive=False, end=None, end_inclusive=False
    )
    iterator = await db.scan_prefix_with_options(keys.SEQ_PREFIX, subrange, DURABLE_ASC)
    pointers = await take(iterator, limit)
    values = await asyncio.gather(*(db.get_with_options(p.value, READ) for p in pointers))
    messages: list[Message] = []
    for pointer, value in zip(pointers, values, strict=True):
        if value is None:
            raise JournalUnavailable(f"journal at {url}: seq index {pointer.key!r} points to a missing row")
        messages.append(keys.parse_row(url, pointer.value, value))
    return messages
