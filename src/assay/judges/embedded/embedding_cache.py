"""A bounded, process-wide cache of sentence embeddings, keyed by model and text.

The same context, query or sentence comes back again and again: several systems' answers judged
against one question set, a server seeing the same documents in many requests, the OOD judge
embedding a profile's texts for every row. `CachedEncoder` wraps any `Encoder` so that each
distinct text is encoded once per process, while it stays in the cache.

Nothing here can change a result: a cached vector is the very row the encoder returned, and the
encoder gives a text the same row whatever other texts share its call (MiniLM's int8 graph
dequantises its weights and computes in float; `tests/test_embedding_cache.py` holds results
byte-identical with and without the cache, across batchings).

Memory is bounded: entries cost `entry_bytes(dim)` each as accounted here (the vector, a
32-byte digest of the text as key, and the bookkeeping around them), and the least recently used
are dropped beyond `max_bytes`. The text itself is not kept, so a 100,000-character context
costs what a short sentence does. The shared cache's size comes from `$ASSAY_EMBEDDING_CACHE_MB`
(default 64; 0 turns caching off).
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from assay import environment
from assay._sync import load_once
from assay.judges.embedded.encoder import Encoder, Kind, Matrix, load_encoder

CACHE_MB_ENV = environment.CACHE_MB_ENV
#: Bytes an entry costs besides its vector's data: the key tuple and its digest, the array
#: object and the LRU map's node. Measured with tracemalloc (about 320 bytes on CPython 3.11)
#: and rounded up; `tests/test_embedding_cache.py` checks the bound against real allocations.
ENTRY_OVERHEAD_BYTES = 512

_Key = tuple[str, str, bytes]


def entry_bytes(dim: int) -> int:
    """What one cached vector of `dim` float32 values is accounted at."""
    return dim * 4 + ENTRY_OVERHEAD_BYTES


def _digest(text: str) -> bytes:
    # A 256-bit digest stands for the text: keys stay small however long the text is.
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=32).digest()


@dataclass(frozen=True)
class CacheStats:
    """Counters of a cache (or their change over a stretch of work, see `since`).

    hits / misses: texts found in the cache / encoded, counted once per distinct text of a call.
    entries: vectors held now; max_bytes: the bound (0: caching is off).
    """

    hits: int = 0
    misses: int = 0
    entries: int = 0
    max_bytes: int = 0

    @property
    def lookups(self) -> int:
        return self.hits + self.misses

    @property
    def hit_rate(self) -> float | None:
        """Share of lookups served from the cache (None before any lookup)."""
        return round(self.hits / self.lookups, 4) if self.lookups else None

    def since(self, earlier: CacheStats) -> CacheStats:
        """The hits and misses counted after `earlier` was taken (entries and bound as now)."""
        return CacheStats(
            self.hits - earlier.hits, self.misses - earlier.misses, self.entries, self.max_bytes
        )

    def plus(self, hits: int, misses: int) -> CacheStats:
        """These counters with another process's hits and misses added (the Ray engine's
        actors encode in processes of their own)."""
        return CacheStats(self.hits + hits, self.misses + misses, self.entries, self.max_bytes)

    def counts(self) -> dict[str, Any]:
        """Hits, misses and hit rate (what a run summary reports)."""
        return {"hits": self.hits, "misses": self.misses, "hit_rate": self.hit_rate}

    def to_dict(self) -> dict[str, Any]:
        """The counts, the entries held and the bound in MiB (what `/healthz` reports)."""
        return {
            **self.counts(),
            "entries": self.entries,
            "max_mb": round(self.max_bytes / 2**20, 3),
        }


class EmbeddingCache:
    """Vectors by (model, kind, text), least recently used dropped beyond `max_bytes`.

    Safe to share between threads.
    """

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError("max_bytes must be >= 0")
        self.max_bytes = max_bytes
        self._vectors: OrderedDict[_Key, Matrix] = OrderedDict()
        self._bytes = 0
        self._hits = 0
        self._misses = 0
        self._lock = threading.Lock()

    @property
    def accounted_bytes(self) -> int:
        """Bytes held as accounted by `entry_bytes` (never above `max_bytes`)."""
        return self._bytes

    def get_many(
        self, model_id: str, kind: str, texts: Sequence[str], count: bool = True
    ) -> list[Matrix | None]:
        """The cached vector of each text, or None.

        count: count each text as a hit or a miss (off for a second look at the same texts).
        """
        if not self.max_bytes:
            if count:
                with self._lock:
                    self._misses += len(texts)
            return [None] * len(texts)
        keys = [(model_id, kind, _digest(text)) for text in texts]
        with self._lock:
            found = [self._vectors.get(key) for key in keys]
            for key, vector in zip(keys, found, strict=True):
                if vector is not None:
                    self._vectors.move_to_end(key)
            if count:
                hits = sum(vector is not None for vector in found)
                self._hits += hits
                self._misses += len(keys) - hits
        return found

    def put_many(self, model_id: str, kind: str, texts: Sequence[str], vectors: Matrix) -> None:
        """Keep one vector per text (rows of `vectors`), dropping the oldest beyond the bound."""
        if not self.max_bytes or not texts:
            return
        cost = entry_bytes(vectors.shape[1])
        entries = []
        for text, row in zip(texts, vectors, strict=True):
            # A copy, so that a cached row does not keep its whole batch's matrix alive.
            vector = np.array(row, dtype=np.float32, copy=True)
            vector.flags.writeable = False
            entries.append(((model_id, kind, _digest(text)), vector))
        with self._lock:
            for key, vector in entries:
                if cost > self.max_bytes:
                    return
                if key in self._vectors:
                    self._vectors.move_to_end(key)
                    continue
                self._vectors[key] = vector
                self._bytes += cost
                while self._bytes > self.max_bytes:
                    _, dropped = self._vectors.popitem(last=False)
                    self._bytes -= entry_bytes(dropped.shape[0])

    def stats(self) -> CacheStats:
        with self._lock:
            return CacheStats(self._hits, self._misses, len(self._vectors), self.max_bytes)

    def clear(self) -> None:
        """Drop every vector (the counters stay)."""
        with self._lock:
            self._vectors.clear()
            self._bytes = 0


class CachedEncoder:
    """An `Encoder` that asks `cache` before encoding and keeps what it encodes there.

    encoder: the encoder doing the work; its `model_id` is part of every key.
    cache: where vectors are kept (None: a cache of its own of `$ASSAY_EMBEDDING_CACHE_MB`).
    """

    def __init__(self, encoder: Encoder, cache: EmbeddingCache | None = None) -> None:
        self.encoder = encoder
        self.model_id = encoder.model_id
        self.cache = cache if cache is not None else EmbeddingCache(configured_max_bytes())
        # One encoder call at a time: callers on several threads (runner workers, the OOD
        # judge's rows) would otherwise oversubscribe onnxruntime's threads on small machines,
        # and a text two threads both miss is then encoded once, not twice.
        self._encoding = threading.Lock()

    def encode(self, texts: Sequence[str], kind: Kind = "passage") -> Matrix:
        """L2-normalised embeddings, one row per text (the wrapped encoder's rows)."""
        distinct = list(dict.fromkeys(texts))
        found = self.cache.get_many(self.model_id, kind, distinct)
        vectors = {
            text: vector for text, vector in zip(distinct, found, strict=True) if vector is not None
        }
        missing = [text for text in distinct if text not in vectors]
        if missing:
            with self._encoding:
                # Another thread may have encoded some of them while this one waited.
                late = self.cache.get_many(self.model_id, kind, missing, count=False)
                vectors.update((t, v) for t, v in zip(missing, late, strict=True) if v is not None)
                missing = [text for text in missing if text not in vectors]
                if missing:
                    fresh = self.encoder.encode(missing, kind)
                    self.cache.put_many(self.model_id, kind, missing, fresh)
                    vectors.update(zip(missing, fresh, strict=True))
        if not texts:
            return self.encoder.encode([], kind)
        return np.stack([vectors[text] for text in texts]).astype(np.float32, copy=False)


def configured_max_bytes() -> int:
    """The shared cache's bound from `$ASSAY_EMBEDDING_CACHE_MB` (default 64 MiB)."""
    return int(environment.cache_megabytes() * 2**20)


@load_once
def shared_cache() -> EmbeddingCache:
    """The process-wide cache every shared encoder uses."""
    return EmbeddingCache(configured_max_bytes())


@load_once
def shared_encoder(name: str = "minilm") -> CachedEncoder:
    """The process-wide encoder `name` behind the shared cache: the embedded judge, the
    micro-batcher in front of it, the runner and the OOD judge all encode through it."""
    return CachedEncoder(load_encoder(name), shared_cache())
