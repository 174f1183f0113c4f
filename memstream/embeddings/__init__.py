"""Embedding providers: one interface, an offline default and an OpenAI-compatible client."""
