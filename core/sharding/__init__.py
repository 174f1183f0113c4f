"""Journal shards: which node owns which shard (`membership`)."""
