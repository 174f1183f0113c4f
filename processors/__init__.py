"""The processors: the consumers of the journal and of the derived topics (`thresholds`, `flush`,
`summarizer`, `clickhouse_projection`, `qdrant_projection`, plus the node's `compaction_recovery`).

Each implements `streams.runtime.processor.Processor`: it decodes its records, decides what to do,
and performs the effects through the stores it is given (`memstream.wiring.processors` builds
every processor with its stores and clients); the runtime commits offsets only after `process`
returned. Processors do not import each other. The imports of concrete adapters that remain are
listed one by one in the `processors-through-interfaces` contract of pyproject.toml, until each
goes through a `core.stores` interface.
"""
