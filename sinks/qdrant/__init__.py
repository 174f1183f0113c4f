"""The vector index of agent memory (`core.stores.vectors.VectorIndex`): Qdrant Edge (embedded) and
Qdrant server adapters."""
