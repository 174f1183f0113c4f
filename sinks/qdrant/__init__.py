"""The vector index of agent memory: one interface, Qdrant Edge (embedded) and Qdrant server adapters."""
