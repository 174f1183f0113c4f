"""Reading a range of a thread's journal: the paging loop the compaction processors share.

`messages_between` pages through `Journal.after` (`page_size` messages per read, fewer when fewer
offsets are left up to `up_to`: a thread's offsets are gap-free, so the messages past the range
are not read) until it passed `up_to` or the thread ends, so a range of any length is read in
bounded pieces.

Because offsets are dense, a range that ends before `up_to` is short. On the writer's journal that
means the thread has no more; a `Follower` (a read-only view that sees durable writes late,
`sinks.slatedb.reader`) is asked to `wait_visible` up to `up_to` and the read goes on, so a
processor that got a record of offset `up_to` reads every message up to it.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from core.journal.models import Message, ThreadRef

PAGE_SIZE = 1000
"""Messages per journal read."""


class PagedReader(Protocol):
    """The read `messages_between` needs: `core.stores.journal.Journal.after` (every journal has it)."""

    async def after(self, thread: ThreadRef, offset: int, limit: int = 1000) -> list[Message]:
        """Messages with offset > `offset` (-1 for the start), oldest first, at most `limit`."""
        ...


@runtime_checkable
class Follower(Protocol):
    """A journal view that may lag behind its writer (`sinks.slatedb.reader.SlateJournalReader`)."""

    async def wait_visible(self, thread: ThreadRef, offset: int) -> None:
        """Return once the thread's message at `offset` is visible; StoreUnavailable after a bound."""
        ...


async def messages_between(
    journal: PagedReader,
    thread: ThreadRef,
    *,
    after: int,
    up_to: int,
    agent_id: str | None = None,
    page_size: int = PAGE_SIZE,
) -> list[Message]:
    """The thread's messages with `after < offset <= up_to` (only `agent_id`'s when given), oldest
    first. Empty when `up_to <= after`. On a `Follower` it waits until `up_to` is visible (module
    doc). Errors of the journal propagate."""
    if page_size < 1:
        raise ValueError(f"page_size must be positive, not {page_size}")
    found: list[Message] = []
    cursor = after
    waited = False
    while cursor < up_to:
        page = await journal.after(thread, cursor, min(page_size, up_to - cursor))
        if not page:
            if waited or not isinstance(journal, Follower):
                break
            await journal.wait_visible(thread, up_to)
            waited = True
            continue
        found.extend(m for m in page if m.offset <= up_to and (agent_id is None or m.agent_id == agent_id))
        cursor = page[-1].offset
    return found
