"""Embedding providers: the offline MiniLM (ONNX), an OpenAI-compatible client, BM25 sparse
vectors, and the factory that builds the configured one (the interface is `core.embeddings.base`).
"""
