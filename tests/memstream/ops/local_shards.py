"""The one journal shard of a test's journal and relay, as the node hands it to the operator
commands (`streams.journal_shards.LocalShard`)."""

from __future__ import annotations

from core.sharding.journal import ShardedJournal
from sinks.slatedb.journal import SlateJournal
from streams.journal_shards import LocalShard
from streams.relays.journal import Relay
from streams.topic_guards import JournalTopicGuard
from tests.fakes.progress import InMemoryProgress


def local_shards(*pairs: tuple[SlateJournal, Relay]) -> list[LocalShard]:
    """Each (journal, relay) as a local shard (shard = the journal's), its guard over no groups."""
    return [
        LocalShard(journal.shard, journal, relay, JournalTopicGuard(journal, relay, InMemoryProgress(), []))
        for journal, relay in pairs
    ]


def sharded(*journals: SlateJournal) -> ShardedJournal[SlateJournal]:
    """The journals (one per shard) as every thread's journal."""
    return ShardedJournal(len(journals), {journal.shard: journal for journal in journals})
