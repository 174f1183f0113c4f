"""`FullHistory`: before `memstream rebuild clickhouse` reads `journal.messages` from its start, make
sure the topic holds every journal shard's seqs from 1 (`JournalTopicGuard.ensure_full_history`:
a shard whose part of the topic may lack early seqs is republished from seq 1), on a node taking
part in the shard membership (`MEMSTREAM_MEMBERSHIP`).

A shard of this node: its guard, here. A shard another node serves: that node's guard, asked
`POST {owner}/admin/v1/shards/full-history` `{"shard": k}` with the nodes' shared admin token
(`memstream.api.routes.shard_journal`). No live owner, an owner that does not answer or refuses
(e.g. the shard moved away from it meanwhile) is `RebuildFailed` naming the shard and what to do;
nothing was rebuilt yet.
"""

from __future__ import annotations

from typing import Protocol

import httpx

from memstream.api.forwarding import Local, Placement, Remote
from memstream.ops.rebuild_base import RebuildFailed
from streams.journal_shards import LocalShards

FULL_HISTORY_PATH = "/admin/v1/shards/full-history"


class ShardOwners(Protocol):
    """Where each journal shard is served (`memstream.sharding.owners.LeaseOwners`)."""

    def shard(self, shard: int) -> Placement: ...


class FullHistory:
    """See the module doc. `admin_token` is the nodes' shared admin token."""

    def __init__(
        self,
        owners: ShardOwners,
        admin_token: str,
        *,
        timeout_s: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.owners = owners
        self._headers = {"Authorization": f"Bearer {admin_token}"}
        self._timeout = httpx.Timeout(timeout_s, connect=2.0)
        self._transport = transport

    async def ensure(self, local: LocalShards, shards: int) -> None:
        """Every one of `shards` shards' seqs from 1 on the topic (or on their way: module doc)."""
        here = {source.shard: source for source in local}
        remote: list[tuple[int, Remote]] = []
        for shard in range(shards):
            if shard in here:
                await here[shard].guard.ensure_full_history()
                continue
            placed = self.owners.shard(shard)
            if isinstance(placed, Remote):
                remote.append((shard, placed))
            elif isinstance(placed, Local):
                raise RebuildFailed(
                    f"journal shard {shard} was being opened on this node when the rebuild started; "
                    "run the rebuild again"
                )
            else:
                raise RebuildFailed(
                    f"no live node serves journal shard {shard} right now (a node is taking it over), so "
                    "the rebuild cannot make sure the topic holds its seqs from 1; run the rebuild again "
                    "in a few seconds"
                )
        if not remote:
            return
        async with httpx.AsyncClient(
            timeout=self._timeout, trust_env=False, follow_redirects=False, transport=self._transport
        ) as client:
            for shard, owner in remote:
                await self._ask(client, shard, owner)

    async def _ask(self, client: httpx.AsyncClient, shard: int, owner: Remote) -> None:
        what_to_do = (
            f"run the rebuild again (if it keeps failing: `memstream republish --shard {shard} --from-seq 1 "
            f"--node {owner.url}`, then the rebuild)"
        )
        try:
            response = await client.post(
                owner.url + FULL_HISTORY_PATH, json={"shard": shard}, headers=self._headers
            )
        except httpx.HTTPError as exc:
            raise RebuildFailed(
                f"journal shard {shard} is served by node {owner.node_id!r} at {owner.url}, which did not "
                f"answer ({type(exc).__name__}) when asked to make sure the topic holds the shard's seqs "
                f"from 1; {what_to_do}"
            ) from exc
        if response.status_code != 200:
            raise RebuildFailed(
                f"journal shard {shard} is served by node {owner.node_id!r} at {owner.url}, which could not "
                f"make sure the topic holds the shard's seqs from 1 (HTTP {response.status_code}: "
                f"{response.text[:300]}); {what_to_do}"
            )
