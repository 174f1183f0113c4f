"""The context of a projected message: the terms of the user or assistant message before it in
its thread (`TranscriptRow.context_terms`), so that BM25 reads a turn together with what it answers.

Only messages with terms of their own take part: a message without any (a pure tool call, a
tool result, a system prompt, a reply of stop words only) gets no context, so it never becomes a
result on its predecessor's words alone, and is skipped as a predecessor (the answer after a tool
call takes the terms of the question before the call).

Deterministic: a row's context depends only on the thread's earlier messages (immutable journal
entries), never on batching or timing, so a replay or a rebuild writes identical rows. Within a
batch it comes from the batch itself; for a thread's lowest offset in the batch, from `prior`: the
latest user/assistant message of the thread below that offset, which is already in the table (a
thread's records are in offset order on one partition, and offsets are committed only after
their insert). `ContextCache` remembers that message per thread between batches; a thread it
does not know at exactly that offset (first batch, a redelivery, a replay, a gap left by a
dead-lettered record, a thread evicted from the cache) is looked up in the store
(`TranscriptStore.previous_terms`, one query per batch for all of them), unless the batch holds
the thread from its offset 0 (a new thread: nothing to look up).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from core.stores.transcripts import ThreadKey, TranscriptRow, TranscriptStore, thread_key

Terms = tuple[str, ...]
Entry = tuple[ThreadKey, int, Terms]
"""A message as the context sees it: (its thread, its offset, its terms)."""

DEFAULT_CACHE_THREADS = 20_000
"""Threads remembered between batches (each entry is one message's terms, ~1 KB)."""


def entry_of(row: TranscriptRow) -> Entry:
    return (thread_key(row), row.offset, row.terms)


def first_offsets(entries: Iterable[Entry]) -> dict[ThreadKey, int]:
    """The lowest offset of a message with terms per thread (threads without are left out)."""
    firsts: dict[ThreadKey, int] = {}
    for key, offset, terms in entries:
        if terms and (key not in firsts or offset < firsts[key]):
            firsts[key] = offset
    return firsts


def opening(entries: Iterable[Entry], firsts: Mapping[ThreadKey, int]) -> set[ThreadKey]:
    """The threads of `firsts` whose entries hold every offset from 0 up to their first with terms:
    nothing precedes that message, so its context is () without a lookup (a new thread)."""
    below: dict[ThreadKey, set[int]] = {}
    for key, offset, _ in entries:
        first = firsts.get(key)
        if first is not None and offset < first:
            below.setdefault(key, set()).add(offset)
    return {key for key, first in firsts.items() if len(below.get(key, ())) == first}


def contexts(entries: Sequence[Entry], prior: Mapping[ThreadKey, Terms]) -> list[Terms]:
    """The context of each entry (same order): for one with terms, the terms of the latest entry
    with terms of its thread with a lower offset among `entries`, else `prior[thread]` (the
    thread's latest before its lowest offset here; () when absent); () for one without terms.
    Copies of one message (same offset) get the same context."""
    by_thread: dict[ThreadKey, dict[int, Terms]] = {}
    for key, offset, terms in entries:
        if terms:
            by_thread.setdefault(key, {})[offset] = terms
    context: dict[tuple[ThreadKey, int], Terms] = {}
    for key, messages in by_thread.items():
        previous = prior.get(key, ())
        for offset in sorted(messages):
            context[(key, offset)] = previous
            previous = messages[offset]
    return [context[(key, offset)] if terms else () for key, offset, terms in entries]


def with_context(rows: Sequence[TranscriptRow], prior: Mapping[ThreadKey, Terms]) -> list[TranscriptRow]:
    """`rows` (same order) with their `contexts` as `context_terms` (for rows built apart from the
    projection: tests, benchmarks)."""
    found = contexts([entry_of(row) for row in rows], prior)
    return [
        replace(row, context_terms=context) if context else row
        for row, context in zip(rows, found, strict=True)
    ]


class ContextCache:
    """Per thread, the offset after the last message projected and the terms of its latest
    message with terms up to there (LRU, at most `max_threads`)."""

    def __init__(self, max_threads: int = DEFAULT_CACHE_THREADS) -> None:
        if max_threads < 0:
            raise ValueError("max_threads must be >= 0")
        self.max_threads = max_threads
        self._entries: OrderedDict[ThreadKey, tuple[int, Terms]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def split(self, firsts: Mapping[ThreadKey, int]) -> tuple[dict[ThreadKey, Terms], dict[ThreadKey, int]]:
        """(`prior` of the threads known at exactly their first offset, the others' `firsts`)."""
        known: dict[ThreadKey, Terms] = {}
        missing: dict[ThreadKey, int] = {}
        for key, first in firsts.items():
            entry = self._entries.get(key)
            if entry is not None and entry[0] == first:
                known[key] = entry[1]
                self._entries.move_to_end(key)
            else:
                missing[key] = first
        return known, missing

    def remember(self, entries: Sequence[Entry]) -> None:
        """After the messages of `entries` (a batch) were stored with their `contexts`."""
        span: dict[ThreadKey, tuple[int, int]] = {}
        latest: dict[ThreadKey, tuple[int, Terms]] = {}
        for key, offset, terms in entries:
            low, high = span.get(key, (offset, offset))
            span[key] = (min(low, offset), max(high, offset))
            if terms and offset >= latest.get(key, (-1, ()))[0]:
                latest[key] = (offset, terms)
        for key, (low, high) in span.items():
            entry = self._entries.get(key)
            if key in latest:
                self._entries[key] = (high + 1, latest[key][1])
            elif entry is not None and entry[0] == low:  # none with terms: the context carries over
                self._entries[key] = (high + 1, entry[1])
            else:
                self._entries.pop(key, None)
                continue
            self._entries.move_to_end(key)
        while len(self._entries) > self.max_threads:
            self._entries.popitem(last=False)


class ThreadContext:
    """The context of the batches written to one table of `store` (`table` as for
    `TranscriptStore.insert`), batch after batch in each thread's offset order: `prior` gives a
    batch's threads their earlier messages (the cache, then one `previous_terms` lookup for the
    threads it lacks), `remember` notes the batch once it is stored."""

    def __init__(
        self, store: TranscriptStore, table: str | None = None, max_threads: int = DEFAULT_CACHE_THREADS
    ) -> None:
        self.store = store
        self.table = table
        self.cache = ContextCache(max_threads)

    async def prior(self, entries: Sequence[Entry]) -> dict[ThreadKey, Terms]:
        known, missing = self.cache.split(first_offsets(entries))
        for key in opening(entries, missing):
            known[key] = ()
            del missing[key]
        if missing:
            known.update(await self.store.previous_terms(missing, table=self.table))
        return known

    def remember(self, entries: Sequence[Entry]) -> None:
        self.cache.remember(entries)
