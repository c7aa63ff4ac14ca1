"""Embeddings for the offline OOD path: the embedded MiniLM encoder with a per-process text cache.

The probe bank and each profile are embedded once per process; queries and replies are embedded
in batches. Nothing is loaded until the first call.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from functools import cache

import numpy as np

from assay.judges.embedded.encoder import Encoder, Matrix, load_encoder

#: Most texts kept in the cache; the bank (about 700) and a few profiles fit many times over.
_CACHE_LIMIT = 50_000


class CachedEncoder:
    """Wraps an encoder so each distinct text is embedded once.

    encoder: the sentence encoder to wrap (L2-normalised output).
    """

    def __init__(self, encoder: Encoder) -> None:
        self._encoder = encoder
        self._vectors: dict[str, np.ndarray] = {}
        # The encoder is called from worker threads (asyncio.to_thread); one call at a time
        # keeps onnxruntime's thread pool from being oversubscribed on small machines.
        self._lock = threading.Lock()

    def encode(self, texts: Sequence[str]) -> Matrix:
        """L2-normalised embeddings of `texts`, one row each (empty input gives a 0×384 matrix)."""
        with self._lock:
            missing = list(dict.fromkeys(t for t in texts if t not in self._vectors))
            if missing:
                if len(self._vectors) + len(missing) > _CACHE_LIMIT:
                    self._vectors.clear()
                for text, vector in zip(missing, self._encoder.encode(missing), strict=True):
                    self._vectors[text] = vector
            if not texts:
                return np.zeros((0, 384), dtype=np.float32)
            return np.stack([self._vectors[t] for t in texts]).astype(np.float32)


@cache
def shared_encoder(name: str = "minilm") -> CachedEncoder:
    """The process-wide cached encoder (the embedded judge's MiniLM by default)."""
    return CachedEncoder(load_encoder(name))
