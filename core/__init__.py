"""The domain core, the bottom layer: settings, typed errors, ids and input rules, the domain
models and services (journal, threads, turn context, agent memory, summaries, transcripts, chat
and embedding interfaces, auth) and the store interfaces the upper layers program against
(`core.stores`). It imports no other memstream package and no I/O library: `memstream` >
`processors` > `streams` > `sinks` > `core`, each importing only the ones below it (the contracts
are in pyproject.toml; see docs/architecture.md).
"""
