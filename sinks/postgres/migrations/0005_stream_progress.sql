-- Progress of the journal's consumers kept outside the broker (streams.sequencing explains the facts),
-- so that a broker that lost its topics is refilled from the lowest checkpoint instead of seq 0.

-- The journal relay's per-partition bounds after its last confirmed batch: every journal seq routed
-- to `partition` (under `partitions` partitions) that is <= cursor_seq is <= bound. One statement
-- writes all partitions of a topic at once.
CREATE TABLE relay_bounds (
    topic      text        NOT NULL,
    partitions integer     NOT NULL CHECK (partitions >= 1),
    partition  integer     NOT NULL CHECK (partition >= 0 AND partition < partitions),
    bound      bigint      NOT NULL CHECK (bound >= 0),
    cursor_seq bigint      NOT NULL CHECK (cursor_seq >= 0),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (topic, partitions, partition)
);

-- Per consumer group and partition: every journal seq routed to the partition that is <= done_seq
-- was processed by the group (its effects are durable). Only ever rises.
CREATE TABLE consumer_progress (
    group_id   text        NOT NULL,
    topic      text        NOT NULL,
    partitions integer     NOT NULL CHECK (partitions >= 1),
    partition  integer     NOT NULL CHECK (partition >= 0 AND partition < partitions),
    done_seq   bigint      NOT NULL CHECK (done_seq >= 0),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (group_id, topic, partitions, partition)
);

-- Per consumer group: every journal seq <= watermark was processed by the group. Only ever rises
-- (a replay of the group deletes its rows here and in consumer_progress).
CREATE TABLE consumer_watermarks (
    group_id   text        NOT NULL,
    topic      text        NOT NULL,
    watermark  bigint      NOT NULL CHECK (watermark >= 0),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (group_id, topic)
);

-- Agent-memory records confirmed on memory.entries but not yet applied by the qdrant-projection:
-- the outbox relay moves a row here once the broker confirmed it, the projection records what it
-- applied in memory_outbox_applied, and the relay deletes the rows found in both. When the broker
-- lost memory.entries, the rows left here go back into memory_outbox and are published again.
CREATE TABLE memory_outbox_published (
    seq        bigint      PRIMARY KEY,
    record_key text        NOT NULL,
    value      jsonb,
    created_at timestamptz NOT NULL
);

CREATE TABLE memory_outbox_applied (
    seq bigint PRIMARY KEY
);

-- The identity of a topic on the broker (a fingerprint of its Kafka topic id) that stored progress
-- refers to; a different identity means the broker lost the topic (memory.entries).
CREATE TABLE topic_identities (
    topic       text        PRIMARY KEY,
    fingerprint bigint      NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now()
);
