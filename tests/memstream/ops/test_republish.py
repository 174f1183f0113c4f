"""republish (unit, the in-memory journal and a fake relay): the report counts what the relay
published, a rewind that published nothing fails, and a relay that makes no progress stops the wait
with its error."""

from __future__ import annotations

import pytest

from core.config import Settings
from core.journal.models import NewMessage, ThreadRef
from memstream.ops.progress import Progress
from memstream.ops.republish import RepublishIncomplete, RepublishStalled, republish
from streams.relays.journal import Relay
from tests.fakes.journal import InMemoryJournal


async def journal_of(messages: int) -> InMemoryJournal:
    """A journal whose last seq is `messages`."""
    journal = InMemoryJournal()
    await journal.append(
        ThreadRef(environment="test", account_id="a", thread_id="t"),
        "agent",
        None,
        [NewMessage(role="user", content=f"m{i}") for i in range(messages)],
    )
    return journal


class FakeRelay(Relay):
    """A relay at `cursor` that publishes one message per look at its cursor after the first one
    while `publishing`; `rewind_works=False` makes a rewind that moves nothing."""

    def __init__(
        self, journal: InMemoryJournal, cursor: int, *, publishing: bool = True, rewind_works: bool = True
    ):
        super().__init__(journal, Settings())
        self.at = cursor
        self.last = len(journal.by_seq)
        self.publishing = publishing
        self.rewind_works = rewind_works
        self.looks = 0

    async def cursor(self) -> int:
        self.looks += 1
        if self.publishing and self.looks > 1 and self.at < self.last:
            self.at += 1
            self.stats.published += 1
        return self.at

    async def rewind(self, to_seq: int = 0) -> None:
        self.stats.rewinds += 1
        if self.rewind_works:
            self.at = to_seq


async def test_the_report_counts_what_the_relay_published() -> None:
    journal = await journal_of(30)
    relay = FakeRelay(journal, 30)
    seen: list[Progress] = []
    report = await republish(journal, relay, 10, progress=seen.append, poll_s=0)
    assert (report.from_seq, report.last_seq, report.range_messages) == (10, 30, 21)
    assert report.published == 21 and report.rewound
    assert seen[-1].done == seen[-1].total == 21


async def test_a_relay_behind_the_range_is_followed_not_rewound() -> None:
    journal = await journal_of(30)
    relay = FakeRelay(journal, 5)
    report = await republish(journal, relay, 10, poll_s=0)
    assert not report.rewound and relay.stats.rewinds == 0
    assert report.published == 25  # seq 6..30: published for the first time, the range included


async def test_a_rewind_that_published_nothing_fails() -> None:
    journal = await journal_of(30)
    relay = FakeRelay(journal, 30, rewind_works=False)
    with pytest.raises(RepublishIncomplete, match=r"published only 0 of the 21 message\(s\) of seq 10..30"):
        await republish(journal, relay, 10, poll_s=0)


async def test_a_relay_without_progress_stops_the_wait_with_its_last_error() -> None:
    journal = await journal_of(30)
    relay = FakeRelay(journal, 30, publishing=False)
    relay.stats.last_error = "KafkaException: broker down"
    with pytest.raises(RepublishStalled) as raised:
        await republish(journal, relay, 10, poll_s=0.01, idle_timeout_s=0.2)
    message = raised.value.message
    assert "has not moved from seq 9 for 0.2s" in message
    assert "last relay error: KafkaException: broker down" in message
    assert "memstream republish --from-seq 10" in message
