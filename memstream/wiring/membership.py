"""A node's part in the shard membership (`MEMSTREAM_MEMBERSHIP`, issue 15): the leases in Postgres
(`sinks.postgres.shard_leases`), the `MembershipLoop` applying the plan through the node's
`ShardHost`, and the `Forwarding` of the requests other nodes serve (`memstream.api.forwarding`,
placed by `LeaseOwners`).

The node's id is `settings.node_name` (else the host name) with a random suffix per start; the
other nodes reach it at `settings.node_url`; it has the `projections` role when it hosts the
embedded projections (`settings.projections_node`; with ClickHouse and Qdrant servers every node
serves them and nothing is forwarded for them). A user's erasure deletes the messages of threads of
other nodes' shards through their owners (`memstream.sharding.owner_journal`), and a republish
covers the shards other nodes serve through them (`memstream.api.owner_republish`): both need the
same admin token on every node (`Settings` refuses membership without one).
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass

import asyncpg

from core.config import Settings
from core.sharding.journal import ShardedJournal
from core.sharding.shards import shard_of
from core.stores.shard_leases import PROJECTIONS_ROLE
from memstream.api.forwarding import Forwarding
from memstream.api.owner_republish import OwnerRepublish
from memstream.sharding.full_history import FullHistory
from memstream.sharding.membership_loop import MembershipConfig, MembershipLoop, new_node_id
from memstream.sharding.owner_journal import OwnerJournal
from memstream.sharding.owners import LeaseOwners
from memstream.wiring.shard_host import ShardHost
from sinks.postgres.shard_leases import PostgresShardLeases
from sinks.slatedb.journal import SlateJournal
from streams.journal_shards import LocalShard
from streams.topic_sync import TopicSync


@dataclass(frozen=True)
class Membership:
    """The node's membership loop, the host of its shards and its forwarding (module doc)."""

    loop: MembershipLoop
    host: ShardHost
    forwarding: Forwarding
    journal: OwnerJournal
    """The API's journal: the local shards, and thread deletions carried out by their shard's owner."""
    republish: OwnerRepublish
    """`memstream republish` of the shards other nodes serve, asked of their owners."""
    full_history: FullHistory
    """`rebuild clickhouse`'s topic check of every shard, the others' asked of their owners."""

    async def aclose(self) -> None:
        """Close what the node's shards left open (after the loop stopped) and the HTTP clients."""
        await self.host.close_all()
        await self.forwarding.aclose()
        await self.journal.close()
        await self.republish.aclose()

    @property
    def node_id(self) -> str:
        return self.loop.config.node_id


def membership_config(settings: Settings) -> MembershipConfig:
    """This start's membership settings (module doc)."""
    roles = frozenset({PROJECTIONS_ROLE}) if settings.projections_node else frozenset()
    return MembershipConfig(
        node_id=new_node_id(settings.node_name or socket.gethostname() or "node"),
        url=settings.node_url,
        shards=settings.journal_shards,
        roles=roles,
    )


def build_membership(
    settings: Settings,
    pool: asyncpg.Pool,
    journals: ShardedJournal[SlateJournal],
    shards: list[LocalShard],
    topic_sync: TopicSync,
    make_local_shard: Callable[[int, SlateJournal], LocalShard],
    admin_token: str,
) -> Membership:
    """The node's membership over its pool, its (initially empty) journals and local shards. Does no
    I/O: the loop starts with the node's tasks."""
    host = ShardHost(settings, journals, shards, topic_sync, make_local_shard)
    config = membership_config(settings)
    loop = MembershipLoop(
        PostgresShardLeases(pool, settings.environment), config, host.open_shard, host.close_shard
    )
    owners = LeaseOwners(loop, shard_of, projections_embedded=settings.projections_embedded)
    journal = OwnerJournal(journals, owners, admin_token)
    republish = OwnerRepublish(owners, settings.journal_shards, config.node_id, admin_token)
    history = FullHistory(owners, admin_token)
    return Membership(loop, host, Forwarding(owners, config.node_id), journal, republish, history)
