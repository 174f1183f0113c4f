"""The last messages of recently read threads in memory (`ThreadWindows`), for `SlateJournal.last`.

An agent's context reads `last(thread, n)` with n <= `WINDOW` (the context window of
`core.threads`): a descending prefix scan through the binding and a JSON parse of every row,
again and again for the same threads. The writer of this process knows every message it makes
durable, so it keeps, for each recently read thread, its last `WINDOW` durable messages, and
`last(thread, n <= WINDOW)` of a kept thread is answered from them. Rows are never changed once
written and `Message` is immutable, so the copies are exactly what a durable scan returns, as
long as the kept window never misses a durable message and never holds one that is not durable:

- Filled only by reads. A miss scans the thread's last `WINDOW` durable rows and `put`s them
  (fewer only when the thread has no more, so a short window is the whole thread).
- Kept current by the commit path: once a group is durable, `add` appends each kept thread's new
  messages whose offset is above the kept last one (a scan may already have seen them; offsets are
  gap-free, so the next one must be exactly last + 1, else the thread is dropped) and trims to
  `WINDOW`. A retry answered with the stored message writes nothing and adds nothing.
- Scan racing a commit: a scan that began before a commit was durable may or may not have seen
  it, and if it is put after that commit's `add` ran, that `add` found nothing to update. So each
  `add` is a generation; it records per thread the generation that touched it (`touched`, LRU of
  `MAX_TOUCHED`; an evicted entry raises `forgotten`, and a thread not recorded counts as touched
  at `forgotten`). A scan takes a `Ticket` (epoch, generation) before it starts and its result is
  put only if no `add` touched the thread since. `put` runs on the event loop right after the
  scan, with no await between the check and the insert; a scan put before the `add` of a commit
  it saw or missed is corrected by that `add` (above).
- Failed groups: a group whose write failed may still become durable later (it may linger in
  SlateDB's memtable) until the next successful commit has made everything before it durable.
  `invalidate` (called for a failed group, a fenced or a closing journal) clears the windows,
  starts a new epoch and marks the state uncertain until the next `add`; a scan that began while
  uncertain or in an earlier epoch is never put.
- Bounds: at most `max_threads` threads and `max_bytes`, counting each message as the size of its
  stored row plus `MESSAGE_OVERHEAD` (the Python objects of a parsed `Message`); the least
  recently read thread goes first.

Owned by the journal's single writer; not thread-safe (one event loop). Only `last` uses it. A
fenced writer may serve what this process saw until it learns of the fence, as a scan would.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import islice

from core.journal.models import Message
from core.threads import MAX_WINDOW_MESSAGES

WINDOW = MAX_WINDOW_MESSAGES
"""Messages kept per thread: the largest context window (a thread may lower it, never raise it)."""
MAX_THREADS = 10_000
MAX_BYTES = 32 * 1024 * 1024
MESSAGE_OVERHEAD = 1024
"""Bytes counted per kept message on top of its row (a parsed 500-byte row takes ~1.6 KB)."""
MAX_TOUCHED = 10_000
"""Threads whose last commit generation is remembered (older ones count as touched at `forgotten`)."""

ThreadKey = tuple[str, str, str]
"""(environment, account_id, thread_id)."""


@dataclass(frozen=True, slots=True)
class Ticket:
    """Taken before a scan: the state it started from (see the module doc)."""

    epoch: int
    generation: int


class _Window:
    __slots__ = ("charged", "messages", "sizes")

    def __init__(self) -> None:
        self.messages: deque[Message] = deque()
        self.sizes: deque[int] = deque()
        self.charged = 0

    def push(self, message: Message, size: int) -> None:
        self.messages.append(message)
        self.sizes.append(size + MESSAGE_OVERHEAD)
        self.charged += size + MESSAGE_OVERHEAD

    def trim(self, keep: int) -> None:
        while len(self.messages) > keep:
            self.messages.popleft()
            self.charged -= self.sizes.popleft()


def thread_key(message: Message) -> ThreadKey:
    return (message.environment, message.account_id, message.thread_id)


class ThreadWindows:
    """See the module doc."""

    def __init__(
        self,
        *,
        window: int = WINDOW,
        max_threads: int = MAX_THREADS,
        max_bytes: int = MAX_BYTES,
        max_touched: int = MAX_TOUCHED,
    ) -> None:
        if window < 1 or max_threads < 1 or max_touched < 1:
            raise ValueError("window, max_threads and max_touched must be >= 1")
        self.window = window
        self.max_threads = max_threads
        self.max_bytes = max_bytes
        self.max_touched = max_touched
        self._windows: OrderedDict[ThreadKey, _Window] = OrderedDict()  # least recently read first
        self._bytes = 0
        self._generation = 0
        self._touched: OrderedDict[ThreadKey, int] = OrderedDict()
        self._forgotten = 0
        self._epoch = 0
        self._uncertain = False

    def __len__(self) -> int:
        return len(self._windows)

    @property
    def charged_bytes(self) -> int:
        return self._bytes

    # ---- reads ---------------------------------------------------------------------------------

    def get(self, key: ThreadKey, n: int) -> list[Message] | None:
        """The last `n` (1..window) durable messages of the thread, oldest first; None when it is
        not kept."""
        kept = self._windows.get(key)
        if kept is None:
            return None
        self._windows.move_to_end(key)
        messages = kept.messages
        return list(islice(messages, max(0, len(messages) - n), None))

    def ticket(self) -> Ticket | None:
        """Take before a scan whose result may be `put`; None when no scan may be put now."""
        return None if self._uncertain else Ticket(self._epoch, self._generation)

    def put(self, key: ThreadKey, ticket: Ticket | None, rows: Sequence[tuple[Message, int]]) -> bool:
        """Keep `rows` (the thread's last `window` durable messages, oldest first, with the size of
        their rows; fewer only when the thread has no more), read by a scan that began with
        `ticket`, unless a commit or a failure came since (then nothing is kept). Whether kept."""
        if ticket is None or ticket.epoch != self._epoch or self._uncertain:
            return False
        if self._touched.get(key, self._forgotten) > ticket.generation:
            return False
        if len(rows) > self.window:
            raise ValueError(f"a window holds at most {self.window} messages, got {len(rows)}")
        old = self._windows.pop(key, None)
        if old is not None:
            self._bytes -= old.charged
        kept = _Window()
        for message, size in rows:
            kept.push(message, size)
        self._windows[key] = kept
        self._bytes += kept.charged
        self._evict()
        return key in self._windows  # not when it alone exceeds the bytes

    # ---- the writer ----------------------------------------------------------------------------

    def add(self, written: Sequence[tuple[Message, int]]) -> None:
        """After a group commit is durable: `written` is its new messages (seq order) with the size
        of their rows. Appends them to the kept threads and records the threads it touched."""
        self._uncertain = False
        self._generation += 1
        generation = self._generation
        touched = self._touched
        for message, size in written:
            key = thread_key(message)
            touched[key] = generation
            touched.move_to_end(key)
            kept = self._windows.get(key)
            if kept is None:
                continue
            last = kept.messages[-1].offset if kept.messages else -1
            if message.offset <= last:
                continue  # the scan that filled it saw this commit already
            if message.offset != last + 1:  # cannot happen (offsets are gap-free): do not guess
                self._bytes -= self._windows.pop(key).charged
                continue
            before = kept.charged
            kept.push(message, size)
            kept.trim(self.window)
            self._bytes += kept.charged - before
        while len(touched) > self.max_touched:
            _, evicted = touched.popitem(last=False)
            self._forgotten = max(self._forgotten, evicted)
        self._evict()

    def invalidate(self) -> None:
        """A group failed (it may still become durable), or the journal is fenced or closing: keep
        nothing, and put no scan begun before the next successful `add`."""
        self._windows.clear()
        self._bytes = 0
        self._epoch += 1
        self._uncertain = True

    def _evict(self) -> None:
        while self._windows and (len(self._windows) > self.max_threads or self._bytes > self.max_bytes):
            _, kept = self._windows.popitem(last=False)
            self._bytes -= kept.charged
