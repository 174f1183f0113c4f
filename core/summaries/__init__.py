"""Thread summaries: the model, its keys and errors, the reader/writer/cache interfaces
(`models`), and the cache-aside, never-older read over them (`layered`). The adapters are
`sinks.objectstore.summaries` and `sinks.redis.summary_cache`.
"""
