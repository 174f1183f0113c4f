"""Journal shards: which shard a thread lives in (`shards`), and the journal of several shards
(`journal`: `ShardedJournal`)."""
