"""Chat models: one interface (`core.chat.base.ChatModel`), the versioned prompts, and the offline
default (no network, no weights: extractive summaries and rule-based facts). The
OpenAI-compatible client and the settings factory are in `sinks.chat`."""
