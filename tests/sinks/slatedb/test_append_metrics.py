"""The journal's metrics (`core.metrics`): every durable append's latency, every SlateDB write's
size, and the messages each account made durable, a retried append's counting once."""

from __future__ import annotations

import asyncio

from core.metrics import REGISTRY
from sinks.slatedb.journal import SlateJournal

from .helpers import thread, user


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_appends_are_counted_per_account_and_timed(journal: SlateJournal) -> None:
    account = f"acc-{id(journal)}"  # the registry is the process's: a fresh account starts at 0
    appended = "memstream_messages_appended_total"
    appends = sample("memstream_journal_append_duration_seconds_count")
    writes = sample("memstream_journal_group_messages_count")
    messages = sample("memstream_journal_group_messages_sum")

    first = [user("one", "m1"), user("two", "m2")]
    await journal.append(thread("t1", account), "a", None, first)
    await journal.append(thread("t1", account), "a", None, first)  # a retry: nothing new is written
    await asyncio.gather(
        *(journal.append(thread(f"t{i}", account), "a", None, [user("x")]) for i in range(2, 12)),
        journal.append(thread("t1", "other-" + account), "a", None, [user("y")]),
    )

    assert sample(appended, environment="test", account=account) == 12
    assert sample(appended, environment="test", account="other-" + account) == 1
    assert sample("memstream_journal_append_duration_seconds_count") == appends + 13
    assert sample("memstream_journal_group_messages_sum") == messages + 13
    new_writes = sample("memstream_journal_group_messages_count") - writes
    assert 2 <= new_writes < 12  # the concurrent appends shared writes; the retry wrote none
