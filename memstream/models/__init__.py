"""Chat models: one interface (`memstream.models.base.ChatModel`), an OpenAI-compatible client,
an offline default (no network, no weights), the versioned prompts and the settings factory."""
