"""Journal shards: which shard a thread lives in (`shards`), the journal of several shards
(`journal`: `ShardedJournal`), and which node owns which shard (`membership`)."""
