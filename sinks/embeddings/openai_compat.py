"""Embeddings from an OpenAI-compatible `/v1/embeddings` endpoint, through the `openai` package.

`OpenAIEmbedder(model, base_url=..., api_key=..., timeout_s=..., max_retries=...)`: requests carry
at most `batch_size` texts and `encoding_format="float"` (compatible servers need not support
base64). Connection errors, timeouts, 408/409/429 and 5xx responses are retried by the client with
exponential backoff (honouring `Retry-After`) up to `max_retries` times. Whatever still fails,
and any malformed answer (wrong count, wrong dimensions, non-numbers), raises `EmbeddingError`.
Vectors are L2-normalised here, so any compatible server satisfies the `Embedder` contract.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import openai

from core.embeddings.errors import EmbeddingError

KNOWN_DIMENSIONS = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}
DEFAULT_MODEL = "text-embedding-3-small"


class OpenAIEmbedder:
    """`Embedder` over an OpenAI-compatible API (module doc). `model_id` is the model name (with
    the size when shortened: the index collection is keyed by it)."""

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 30.0,
        max_retries: int = 3,
        dimensions: int | None = None,
        batch_size: int = 256,
    ) -> None:
        dims = dimensions if dimensions is not None else KNOWN_DIMENSIONS.get(model)
        if dims is None or dims < 1:
            raise ValueError(f"unknown dimensions of embedding model {model!r}: pass dimensions=")
        if batch_size < 1 or batch_size > 2048:
            raise ValueError("batch_size must be within 1..2048 (the API's limit per request)")
        self._model = model
        self._dimensions = dims
        self._batch_size = batch_size
        # `dimensions=` is sent only when it differs from the model's native size
        self._request_dims = dimensions if dimensions is not None and model in KNOWN_DIMENSIONS else None
        self._client = openai.AsyncOpenAI(
            base_url=base_url,
            api_key=api_key or "unused",  # compatible local servers often need no key
            timeout=timeout_s,
            max_retries=max_retries,
        )

    @property
    def model_id(self) -> str:
        """The model name; `name@dims` when the vectors are shortened (`dimensions=` below the
        model's native size), so that collections of different sizes never share a name."""
        native = KNOWN_DIMENSIONS.get(self._model)
        if native is not None and self._dimensions != native:
            return f"{self._model}@{self._dimensions}"
        return self._model

    @property
    def dimensions(self) -> int:
        return self._dimensions

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One unit-norm vector per text, in order. Raises `EmbeddingError` (module doc)."""
        out: list[list[float]] = []
        for start in range(0, len(texts), self._batch_size):
            out.extend(await self._embed_batch(list(texts[start : start + self._batch_size])))
        return out

    async def _embed_batch(self, texts: list[str]) -> list[list[float]]:
        try:
            if self._request_dims is not None:
                response = await self._client.embeddings.create(
                    model=self._model, input=texts, encoding_format="float", dimensions=self._request_dims
                )
            else:
                response = await self._client.embeddings.create(
                    model=self._model, input=texts, encoding_format="float"
                )
        except openai.OpenAIError as exc:
            raise EmbeddingError(f"embedding request to {self._client.base_url} failed: {exc}") from exc
        except (ValueError, TypeError, KeyError) as exc:  # undecodable body
            raise EmbeddingError(f"malformed embedding response: {exc}") from exc
        return self._vectors(response, len(texts))

    def _vectors(self, response: object, count: int) -> list[list[float]]:
        data = getattr(response, "data", None)
        if not isinstance(data, list) or len(data) != count:
            got = len(data) if isinstance(data, list) else type(data).__name__
            raise EmbeddingError(f"malformed embedding response: expected {count} embeddings, got {got}")
        by_index: dict[int, list[float]] = {}
        for item in data:
            index, embedding = getattr(item, "index", None), getattr(item, "embedding", None)
            if not isinstance(index, int) or not 0 <= index < count or index in by_index:
                raise EmbeddingError(f"malformed embedding response: bad or repeated index {index!r}")
            by_index[index] = self._normalised(embedding)
        return [by_index[i] for i in range(count)]

    def _normalised(self, embedding: object) -> list[float]:
        if not isinstance(embedding, list) or len(embedding) != self._dimensions:
            size = len(embedding) if isinstance(embedding, list) else type(embedding).__name__
            raise EmbeddingError(
                f"malformed embedding response: expected {self._dimensions} dimensions, got {size}"
            )
        if not all(isinstance(x, int | float) and not isinstance(x, bool) for x in embedding):
            raise EmbeddingError("malformed embedding response: non-numeric vector component")
        values = [float(x) for x in embedding]
        norm = math.sqrt(math.fsum(x * x for x in values))
        if not math.isfinite(norm) or norm == 0.0:
            raise EmbeddingError("malformed embedding response: zero or non-finite vector")
        return [x / norm for x in values]

    async def close(self) -> None:
        await self._client.close()
