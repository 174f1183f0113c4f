"""Build the configured chat model from `settings.chat_model`."""

from __future__ import annotations

from core.chat.base import ChatModel
from core.chat.offline import MODEL_ID, OfflineChatModel
from core.config import ModelSettings
from sinks.chat.openai_chat import OpenAIChatModel


def build_chat_model(config: ModelSettings, *, setting: str = "chat_model") -> ChatModel:
    """`offline` -> `OfflineChatModel` (the model name must stay `offline`); `openai` ->
    `OpenAIChatModel` on `base_url` with `model`, `api_key` (optional: local servers often need
    none), `timeout_s` and `max_retries`. `setting` names the settings field in error messages.
    ValueError, naming the setting and its environment variable, for an unusable configuration."""
    env = f"MEMSTREAM_{setting.upper()}__"
    if config.provider == "offline":
        if config.model != MODEL_ID:
            raise ValueError(
                f"{setting}.model is {config.model!r}, but the offline provider has no models to choose "
                f"from: "
                f"set {env}PROVIDER=openai to use {config.model!r}, or leave {env}MODEL unset"
            )
        return OfflineChatModel()
    if not config.base_url:
        raise ValueError(
            f"{setting}.base_url is required with provider 'openai': set {env}BASE_URL to the endpoint's "
            "/v1 URL (e.g. https://api.openai.com/v1 or http://127.0.0.1:8000/v1 for a local server)"
        )
    if not config.model or config.model == MODEL_ID:
        raise ValueError(
            f"{setting}.model is required with provider 'openai': set {env}MODEL to the model name the "
            "endpoint serves (e.g. gpt-4o-mini)"
        )
    return OpenAIChatModel(
        config.model,
        base_url=config.base_url,
        api_key=config.api_key.get_secret_value() if config.api_key is not None else None,
        timeout_s=config.timeout_s,
        max_retries=config.max_retries,
    )
