"""The `shard_nodes` and `shard_leases` tables (migration 0018) behind
`core.stores.shard_leases.ShardLeaseStore`, for one environment.

SQL only; every instant is Postgres' `now()` (the statement's start), so the nodes share one
clock. `claim` is one `INSERT ... ON CONFLICT DO UPDATE ... WHERE` statement: Postgres locks the
shard's row for the first claimer, and a racing claimer waits for it and then sees a lease that
has not run out, so it updates nothing (one winner, whatever the interleaving). The URL of the
lease is copied from the claimer's heartbeat row by the same statement.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import asyncpg

from core.stores.shard_leases import NodeInfo, ShardLease, UnknownNode, check_shard, check_ttl

_LEASE = "shard, node_id, node_url, epoch, expires_at"


def _lease(row: Any) -> ShardLease:
    return ShardLease(
        shard=row["shard"],
        node_id=row["node_id"],
        node_url=row["node_url"],
        epoch=row["epoch"],
        expires_at=row["expires_at"],
    )


class PostgresShardLeases:
    """The nodes and shard leases of `environment` in PostgreSQL (module doc). Uses the caller's
    pool (does not close it)."""

    def __init__(self, pool: asyncpg.Pool, environment: str) -> None:
        self._pool = pool
        self.environment = environment

    async def heartbeat(self, node_id: str, url: str, roles: frozenset[str] = frozenset()) -> datetime:
        seen_at: datetime = await self._pool.fetchval(
            """INSERT INTO shard_nodes (environment, node_id, url, roles) VALUES ($1, $2, $3, $4)
               ON CONFLICT (environment, node_id)
               DO UPDATE SET url = EXCLUDED.url, roles = EXCLUDED.roles, seen_at = now()
               RETURNING seen_at""",
            self.environment,
            node_id,
            url,
            sorted(roles),
        )
        return seen_at

    async def leave(self, node_id: str) -> None:
        await self._pool.execute(
            "DELETE FROM shard_nodes WHERE environment = $1 AND node_id = $2", self.environment, node_id
        )

    async def live_nodes(self, within_s: float) -> list[NodeInfo]:
        rows = await self._pool.fetch(
            """SELECT node_id, url, roles, seen_at FROM shard_nodes
               WHERE environment = $1 AND seen_at >= now() - make_interval(secs => $2)
               ORDER BY node_id""",
            self.environment,
            float(within_s),
        )
        return [
            NodeInfo(node_id=r["node_id"], url=r["url"], seen_at=r["seen_at"], roles=frozenset(r["roles"]))
            for r in rows
        ]

    async def claim(self, shard: int, node_id: str, ttl_s: float) -> ShardLease | None:
        check_shard(shard)
        check_ttl(ttl_s)
        row = await self._pool.fetchrow(
            f"""INSERT INTO shard_leases AS l (environment, shard, node_id, node_url, epoch, expires_at)
                SELECT $1, $2, n.node_id, n.url, 1, now() + make_interval(secs => $4)
                FROM shard_nodes n WHERE n.environment = $1 AND n.node_id = $3
                ON CONFLICT (environment, shard) DO UPDATE
                SET node_id = EXCLUDED.node_id, node_url = EXCLUDED.node_url, epoch = l.epoch + 1,
                    expires_at = EXCLUDED.expires_at
                WHERE l.node_id IS NULL OR l.expires_at <= now()
                RETURNING {_LEASE}""",
            self.environment,
            shard,
            node_id,
            float(ttl_s),
        )
        if row is not None:
            return _lease(row)
        known = await self._pool.fetchval(
            "SELECT true FROM shard_nodes WHERE environment = $1 AND node_id = $2", self.environment, node_id
        )
        if not known:
            raise UnknownNode(
                f"node {node_id!r} claimed shard {shard} before its first heartbeat in environment "
                f"{self.environment!r}: send a heartbeat (its URL) first"
            )
        return None

    async def renew(self, lease: ShardLease, ttl_s: float) -> ShardLease | None:
        check_ttl(ttl_s)
        row = await self._pool.fetchrow(
            f"""UPDATE shard_leases SET expires_at = now() + make_interval(secs => $5)
                WHERE environment = $1 AND shard = $2 AND node_id = $3 AND epoch = $4
                  AND expires_at > now()
                RETURNING {_LEASE}""",
            self.environment,
            lease.shard,
            lease.node_id,
            lease.epoch,
            float(ttl_s),
        )
        return None if row is None else _lease(row)

    async def release(self, lease: ShardLease) -> bool:
        status = await self._pool.execute(
            """UPDATE shard_leases SET node_id = NULL, node_url = NULL, expires_at = now()
               WHERE environment = $1 AND shard = $2 AND node_id = $3 AND epoch = $4""",
            self.environment,
            lease.shard,
            lease.node_id,
            lease.epoch,
        )
        return bool(status == "UPDATE 1")

    async def owners(self) -> list[ShardLease]:
        rows = await self._pool.fetch(
            f"""SELECT {_LEASE} FROM shard_leases
                WHERE environment = $1 AND node_id IS NOT NULL ORDER BY shard""",
            self.environment,
        )
        return [_lease(r) for r in rows]
