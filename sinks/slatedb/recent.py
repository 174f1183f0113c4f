"""The journal's most recent durable messages in memory (`RecentMessages`), for the relay's reads.

`read_from_seq` costs a point lookup per message through the binding (~90 us each); the relay
reads what was just appended. The writer of this process knows every message it made durable, so
it keeps the last of them, in seq order and without a hole, and `read_from_seq` answers from them
when they cover the whole range asked: from `after_seq + 1` up to the durable end (the journal's
`durable_seq`). Anything else (older seqs, a hole left by a failed group whose batch may still
become durable, the journal after a restart) is read from storage. Rows are never changed once
written and `Message` is immutable, so the copies are exactly what storage would return.

The messages kept are bounded by count (`max_messages`) and by the size of their stored rows
(`max_bytes`); the oldest go first.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from itertools import islice

from core.journal.models import Message

MAX_MESSAGES = 10_000
MAX_BYTES = 16 * 1024 * 1024


class RecentMessages:
    """See the module doc. Owned by one writer (not thread-safe)."""

    def __init__(self, *, max_messages: int = MAX_MESSAGES, max_bytes: int = MAX_BYTES) -> None:
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self._messages: deque[tuple[Message, int]] = deque()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._messages)

    def add(self, written: Sequence[tuple[Message, int]]) -> None:
        """Keep `written` (durable messages of one group with the size of their rows, in seq
        order, seqs consecutive). A group that does not continue the kept messages replaces them."""
        if not written:
            return
        if self._messages and written[0][0].seq != self._messages[-1][0].seq + 1:
            self.clear()
        for message, size in written:
            self._messages.append((message, size))
            self._bytes += size
        while self._messages and (len(self._messages) > self.max_messages or self._bytes > self.max_bytes):
            _, size = self._messages.popleft()
            self._bytes -= size

    def clear(self) -> None:
        self._messages.clear()
        self._bytes = 0

    def read(self, after_seq: int, limit: int, durable_seq: int) -> list[Message] | None:
        """The messages with seq > `after_seq`, at most `limit`, when the kept messages hold all of
        them up to `durable_seq`; None when storage must be read."""
        if not self._messages or self._messages[-1][0].seq != durable_seq:
            return None
        first = self._messages[0][0].seq
        if after_seq >= durable_seq:
            return []
        if after_seq + 1 < first:
            return None
        start = after_seq + 1 - first
        return [message for message, _ in islice(self._messages, start, start + limit)]
