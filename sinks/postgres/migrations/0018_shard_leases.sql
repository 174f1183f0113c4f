-- Journal shards across nodes (sinks/postgres/shard_leases.py, core/stores/shard_leases.py).
-- `shard_nodes`: each node's last heartbeat (the URL other nodes forward requests to, its roles).
-- `shard_leases`: who holds each shard until when. A released shard keeps its row with no holder, so
-- that its epoch keeps rising with every claim. Every instant is Postgres' now(): one clock.
CREATE TABLE shard_nodes (
    environment text        NOT NULL,
    node_id     text        NOT NULL,
    url         text        NOT NULL,
    roles       text[]      NOT NULL DEFAULT '{}',
    seen_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (environment, node_id)
);

CREATE TABLE shard_leases (
    environment text        NOT NULL,
    shard       integer     NOT NULL CHECK (shard >= 0),
    node_id     text,
    node_url    text,
    epoch       bigint      NOT NULL CHECK (epoch >= 1),
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (environment, shard),
    CHECK ((node_id IS NULL) = (node_url IS NULL))
);
