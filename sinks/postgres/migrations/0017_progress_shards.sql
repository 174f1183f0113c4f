-- Journal shards (core.sharding.shards): every shard numbers its own seqs, so the relay bounds and
-- each consumer group's progress are kept per shard. Rows stored before shards existed are shard 0
-- (a deployment of one shard is shard 0 of 1).
ALTER TABLE relay_bounds ADD COLUMN shard integer NOT NULL DEFAULT 0 CHECK (shard >= 0);
ALTER TABLE relay_bounds DROP CONSTRAINT relay_bounds_pkey;
ALTER TABLE relay_bounds ADD PRIMARY KEY (topic, shard, partitions, partition);

ALTER TABLE consumer_progress ADD COLUMN shard integer NOT NULL DEFAULT 0 CHECK (shard >= 0);
ALTER TABLE consumer_progress DROP CONSTRAINT consumer_progress_pkey;
ALTER TABLE consumer_progress ADD PRIMARY KEY (group_id, topic, shard, partitions, partition);

ALTER TABLE consumer_watermarks ADD COLUMN shard integer NOT NULL DEFAULT 0 CHECK (shard >= 0);
ALTER TABLE consumer_watermarks DROP CONSTRAINT consumer_watermarks_pkey;
ALTER TABLE consumer_watermarks ADD PRIMARY KEY (group_id, topic, shard);
