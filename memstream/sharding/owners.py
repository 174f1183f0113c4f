"""`LeaseOwners`: where requests are served (`memstream.api.forwarding.Owners`), from what a node's
`MembershipLoop` knows.

- A thread: its shard is `shard_of(environment, account_id, thread_id, shards)` (the wiring gives
  `core.sharding.shards.shard_of`), placed as that shard (`shard(k)`). A shard: `LOCAL` when this
  node serves the shard (the loop holds its lease); otherwise the holder of the shard's lease in the
  loop's last view of the store (at most a round old), if that lease has not run out by the store's
  clock as of the view, advanced by the time since it was read: `Remote(node_id, url)`; else
  `UNKNOWN` (nobody, or the lease ran out: a takeover is due within a round). A shard this node is
  giving up is `UNKNOWN` too.
- The agent surfaces: `LOCAL` when the projections are not embedded (`projections_embedded=False`:
  ClickHouse and Qdrant servers, any node can serve them) or when this node has the `projections`
  role; otherwise the live node with that role in the last view (the first by id should there be
  several), else `UNKNOWN`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta

from core.stores.shard_leases import PROJECTIONS_ROLE, ShardLease
from memstream.api.forwarding import LOCAL, UNKNOWN, Placement, Remote
from memstream.sharding.membership_loop import MembershipLoop, View

ShardOf = Callable[[str, str, str, int], int]
"""`shard_of(environment, account_id, thread_id, shards)` -> the thread's shard."""


class LeaseOwners:
    """See the module doc."""

    def __init__(
        self,
        loop: MembershipLoop,
        shard_of: ShardOf,
        *,
        projections_embedded: bool,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.loop = loop
        self.shard_of = shard_of
        self.projections_embedded = projections_embedded
        self._clock = clock
        self._indexed: tuple[View | None, dict[int, ShardLease]] = (None, {})

    def thread(self, environment: str, account_id: str, thread_id: str) -> Placement:
        return self.shard(self.shard_of(environment, account_id, thread_id, self.loop.config.shards))

    def shard(self, shard: int) -> Placement:
        """Where journal shard `shard` is served (module doc; `memstream.api.owner_republish`)."""
        if shard in self.loop.open_shards:
            return LOCAL
        view = self.loop.view
        if view is None:
            return UNKNOWN
        lease = self._by_shard(view).get(shard)
        now = view.now + timedelta(seconds=self._clock() - view.read_at)
        if lease is None or not lease.valid_at(now) or lease.node_id == self.loop.config.node_id:
            return UNKNOWN
        return Remote(lease.node_id, lease.node_url)

    def projections(self) -> Placement:
        if not self.projections_embedded or PROJECTIONS_ROLE in self.loop.config.roles:
            return LOCAL
        view = self.loop.view
        hosts = sorted(
            (n for n in view.nodes if PROJECTIONS_ROLE in n.roles) if view else (), key=lambda n: n.node_id
        )
        if not hosts:
            return UNKNOWN
        return Remote(hosts[0].node_id, hosts[0].url)

    def _by_shard(self, view: View) -> dict[int, ShardLease]:
        seen, index = self._indexed
        if seen is not view:
            index = {lease.shard: lease for lease in view.leases}
            self._indexed = (view, index)
        return index
