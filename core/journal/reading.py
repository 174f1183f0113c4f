"""Reading a range of a thread's journal: the paging loop the compaction processors share.

`messages_between` pages through `Journal.after` (`page_size` messages per read, fewer when fewer
offsets are left up to `up_to`: a thread's offsets are gap-free, so the messages past the range
are not read) until it passed `up_to` or the thread ends, so a range of any length is read in
bounded pieces.
"""

from __future__ import annotations

from typing import Protocol

from core.journal.models import Message, ThreadRef

PAGE_SIZE = 1000
"""Messages per journal read."""


class PagedReader(Protocol):
    """The read `messages_between` needs: `core.stores.journal.Journal.after` (every journal has it)."""

    async def after(self, thread: ThreadRef, offset: int, limit: int = 1000) -> list[Message]:
        """Messages with offset > `offset` (-1 for the start), oldest first, at most `limit`."""
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
    first. Empty when `up_to <= after`. Errors of the journal propagate."""
    if page_size < 1:
        raise ValueError(f"page_size must be positive, not {page_size}")
    found: list[Message] = []
    cursor = after
    while cursor < up_to:
        page = await journal.after(thread, cursor, min(page_size, up_to - cursor))
        if not page:
            break
        found.extend(m for m in page if m.offset <= up_to and (agent_id is None or m.agent_id == agent_id))
        cursor = page[-1].offset
    return found
