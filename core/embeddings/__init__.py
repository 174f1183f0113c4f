"""Embeddings: the interface (`core.embeddings.base`) and its errors. The providers (offline
MiniLM, OpenAI-compatible, BM25 sparse vectors) and the settings factory are in `sinks.embeddings`."""
