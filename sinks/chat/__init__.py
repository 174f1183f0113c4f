"""Chat-model clients: an OpenAI-compatible HTTP client, and the factory that builds the
configured model (the offline default lives in `core.chat.offline`).
"""
