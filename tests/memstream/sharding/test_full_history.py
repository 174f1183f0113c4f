"""`FullHistory` against the owner's real route (`POST /admin/v1/shards/full-history`, the admin
router of `memstream.api.routes.shard_journal` in an app of its own, reached in process) over a
real SlateDB journal: a shard of this node is checked here, another node's shard by its owner
(which republishes it from seq 1 when its part of the topic may lack early seqs); an owner that is
unknown, unreachable or no longer serves the shard fails the rebuild naming the shard and what to do."""

from __future__ import annotations

from dataclasses import dataclass, field

import httpx
import pytest
from fastapi import FastAPI

from core.config import Settings
from memstream.api.errors import install_error_handlers
from memstream.api.forwarding import LOCAL, UNKNOWN, Placement, Remote
from memstream.api.routes.shard_journal import shard_journal_router
from memstream.ops.rebuild_base import RebuildFailed
from memstream.sharding.full_history import FullHistory
from sinks.slatedb.journal import SlateJournal
from streams.journal_shards import LocalShard
from streams.relays.journal import DEFAULT_CURSOR, Relay
from tests.memstream.ops.local_shards import local_shards, sharded

TOKEN = "the-nodes-shared-admin-token"
OWNER = Remote("node-b", "http://node-b")


@dataclass
class StaticShardOwners:
    placed: dict[int, Placement] = field(default_factory=dict)
    asked: list[int] = field(default_factory=list)

    def shard(self, shard: int) -> Placement:
        self.asked.append(shard)
        return self.placed.get(shard, UNKNOWN)


def owner_app(journal: SlateJournal, shards: list[LocalShard], settings: Settings) -> httpx.ASGITransport:
    app = FastAPI()
    install_error_handlers(app)
    app.include_router(shard_journal_router(sharded(journal), shards, TOKEN, settings))
    return httpx.ASGITransport(app=app)


async def lacking_early_seqs(local: LocalShard) -> None:
    """The shard's part of the topic starts after seq 5 (a broker that lost its data)."""
    await local.journal.set_cursor(DEFAULT_CURSOR, 5)
    await local.journal.set_cursor(local.guard.floor_cursor, 5)


async def test_a_shard_of_another_node_is_republished_by_its_owner(
    journal: SlateJournal, settings: Settings
) -> None:
    [local] = local_shards((journal, Relay(journal, settings)))
    await lacking_early_seqs(local)
    owners = StaticShardOwners({0: OWNER})
    history = FullHistory(owners, TOKEN, transport=owner_app(journal, [local], settings))
    await history.ensure([], 1)
    assert owners.asked == [0]
    assert await journal.get_cursor(local.guard.floor_cursor) == 0
    assert await journal.get_cursor(DEFAULT_CURSOR) == 0  # its relay publishes it again from seq 1
    await history.ensure([], 1)  # nothing lacks now: nothing changes


async def test_a_shard_of_this_node_is_checked_here(journal: SlateJournal, settings: Settings) -> None:
    [local] = local_shards((journal, Relay(journal, settings)))
    await lacking_early_seqs(local)
    owners = StaticShardOwners()
    await FullHistory(owners, TOKEN).ensure([local], 1)
    assert owners.asked == []
    assert await journal.get_cursor(local.guard.floor_cursor) == 0


async def test_an_owner_that_cannot_do_it_fails_the_rebuild_saying_what_to_do(
    journal: SlateJournal, settings: Settings
) -> None:
    [local] = local_shards((journal, Relay(journal, settings)))
    await lacking_early_seqs(local)
    moved_away = owner_app(journal, [], settings)  # the owner's view: the shard is not open there
    with pytest.raises(RebuildFailed) as failed:
        await FullHistory(StaticShardOwners({0: OWNER}), TOKEN, transport=moved_away).ensure([], 1)
    message = str(failed.value)
    assert "journal shard 0" in message and "node-b" in message and "HTTP 503" in message
    assert "shard_not_local" in message and "memstream republish --shard 0 --from-seq 1" in message
    with pytest.raises(RebuildFailed, match="HTTP 401"):
        wrong_token = owner_app(journal, [local], settings)
        await FullHistory(StaticShardOwners({0: OWNER}), "not-the-token", transport=wrong_token).ensure([], 1)
    assert await journal.get_cursor(local.guard.floor_cursor) == 5  # nothing was done
    with pytest.raises(RebuildFailed, match="no live node serves journal shard 0"):
        await FullHistory(StaticShardOwners(), TOKEN).ensure([], 1)
    with pytest.raises(RebuildFailed, match="journal shard 0 was being opened on this node"):
        await FullHistory(StaticShardOwners({0: LOCAL}), TOKEN).ensure([], 1)
    unreachable = Remote("node-c", "http://127.0.0.1:9")
    with pytest.raises(RebuildFailed, match=r"node 'node-c' .* did not answer \(ConnectError\)"):
        await FullHistory(StaticShardOwners({0: unreachable}), TOKEN).ensure([], 1)
