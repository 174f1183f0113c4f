"""Several `memstream node` processes with the shard membership on (`MEMSTREAM_MEMBERSHIP`), as real
child processes sharing the test's broker, Postgres, Redis, one journal directory and one object
store directory; each node has a data dir, API port and SQL port of its own, node 1 the
`projections` role (its data dir holds the embedded ClickHouse and Qdrant)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from core.config import Settings
from core.stores.shard_leases import ShardLease
from memstream.embedded.process import ManagedProcess, free_port
from sinks.postgres.pool import create_pool
from sinks.postgres.shard_leases import PostgresShardLeases
from tests.memstream.node_process import node_env, node_process

ADMIN_TOKEN = "cluster-admin-token-of-the-test"


@dataclass
class ClusterNode:
    name: str
    port: int
    env: dict[str, str]
    process: ManagedProcess
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@dataclass
class Cluster:
    settings: Settings
    tmp_path: Path
    nodes: list[ClusterNode] = field(default_factory=list)

    def add(self, name: str, *, projections: bool = False) -> ClusterNode:
        data = self.tmp_path / name
        port = free_port()
        env = node_env(self.settings.model_copy(update={"data_dir": data}), port)
        env.update(
            {
                "MEMSTREAM_MEMBERSHIP": "true",
                "MEMSTREAM_NODE_NAME": name,
                "MEMSTREAM_PROJECTIONS_NODE": "true" if projections else "false",
                "MEMSTREAM_JOURNAL_URL": f"file://{self.tmp_path / 'shared' / 'journal'}",
                "MEMSTREAM_OBJECT_STORE_URL": f"file://{self.tmp_path / 'shared' / 'objects'}",
                "MEMSTREAM_ADMIN_TOKEN": ADMIN_TOKEN,
                "MEMSTREAM_ACCESS_LOG": "false",
            }
        )
        log = self.tmp_path / f"{name}.log"
        node = ClusterNode(name, port, env, node_process(env, log), log)
        self.nodes.append(node)
        return node

    def start(self, timeout: float = 120) -> None:
        for node in self.nodes:
            node.process.start(timeout=timeout)

    def stop(self) -> None:
        for node in reversed(self.nodes):
            node.process.stop()

    def leases(self) -> dict[int, ShardLease]:
        """The valid leases of the test's environment, by shard (read through Postgres)."""

        async def read() -> dict[int, ShardLease]:
            pool = await create_pool(self.settings.postgres, min_size=1, max_size=1)
            try:
                store = PostgresShardLeases(pool, self.settings.environment)
                now = await pool.fetchval("SELECT now()")
                return {lease.shard: lease for lease in await store.owners() if lease.valid_at(now)}
            finally:
                await pool.close()

        return asyncio.run(read())

    def wait_for_owners(
        self, shards: int, *, among: set[str] | None = None, timeout_s: float = 30
    ) -> dict[int, str]:
        """Until every shard has a valid lease (held by the nodes named in `among` when given, each
        of them holding its fair share: shards / len(among), rounded down or up): the name of each
        shard's owner."""
        deadline = time.monotonic() + timeout_s
        while True:
            owners = {k: lease.node_id.rsplit("-", 1)[0] for k, lease in self.leases().items()}
            held = Counter(owners.values())
            fair = among is None or (set(held) == among and max(held.values()) - min(held.values()) <= 1)
            if len(owners) == shards and fair:
                return owners
            assert time.monotonic() < deadline, f"shard owners {owners} after {timeout_s} s"
            time.sleep(0.5)


def client(node: ClusterNode, key: str) -> httpx.Client:
    return httpx.Client(base_url=node.url, headers={"Authorization": f"Bearer {key}"}, timeout=30)


@contextlib.contextmanager
def two_nodes(settings: Settings, tmp_path: Path, shards: int) -> Iterator[Cluster]:
    """Nodes `a` (the `projections` role) and `b` over `shards` journal shards, started; stopped
    on the way out."""
    cluster = Cluster(settings.model_copy(update={"journal_shards": shards}), tmp_path)
    cluster.add("a", projections=True)
    cluster.add("b")
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
