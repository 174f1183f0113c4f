"""The error every embedding provider raises."""

from __future__ import annotations

from core.errors import MemstreamError


class EmbeddingError(MemstreamError):
    """Texts could not be embedded (model failed to load or run, provider unreachable after its
    retries, or a malformed response). Nothing was embedded; the caller may retry later."""

    code = "embedding_failed"
