"""The embedding cache: results byte-identical with and without it, LRU order, a memory bound
that holds against real allocations, and hit counts."""

from __future__ import annotations

import json
import random
import tracemalloc
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from assay.detectors.evaluate import detect_items, parse_items
from assay.judges import register_judge
from assay.judges.embedded.embedding_cache import (
    CACHE_MB_ENV,
    CachedEncoder,
    EmbeddingCache,
    configured_max_bytes,
    entry_bytes,
)
from assay.judges.embedded.encoder import Kind, Matrix, load_encoder
from assay.judges.embedded.judge import EmbeddedJudge
from assay.judges.embedded.text import split_sentences

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "rag_rows.jsonl"


class CountingEncoder:
    """The real encoder, counting the texts it is asked to encode."""

    def __init__(self) -> None:
        self.inner = load_encoder("minilm")
        self.model_id = self.inner.model_id
        self.texts = 0

    def encode(self, texts: Sequence[str], kind: Kind = "passage") -> Matrix:
        self.texts += len(texts)
        return self.inner.encode(texts, kind)


class FakeEncoder:
    """Instant vectors for bookkeeping tests (the bound, LRU order); never for results."""

    model_id = "fake"

    def encode(self, texts: Sequence[str], kind: Kind = "passage") -> Matrix:
        return np.full((len(texts), 384), 0.5, dtype=np.float32)


def example_rows() -> list[dict[str, object]]:
    with EXAMPLES.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def rag_body() -> list[dict[str, object]]:
    """The example rows, each question answered five times (its own answer and four others'),
    as several systems compared on one question set; both detectors on every item."""
    rows = example_rows()
    body: list[dict[str, object]] = []
    for system in range(5):
        for index, row in enumerate(rows):
            answer = rows[(index + system) % len(rows)]["generated_text"]
            body.append(
                {
                    "user_query": row["user_query"],
                    "context": row["context"],
                    "generated_text": answer,
                    "config": {"output_relevance": {}, "completeness": {}},
                }
            )
    return body


def test_the_encoder_gives_a_text_the_same_bytes_whatever_shares_its_call() -> None:
    # What makes caching safe: a vector does not depend on the other texts of its call (their
    # number, lengths or order). Checked on real sentences in shuffled batches of many sizes.
    texts: list[str] = []
    for row in example_rows():
        texts.append(str(row["user_query"]))
        texts += split_sentences(str(row["generated_text"]))
        texts += [s for doc in row["context"] for s in split_sentences(str(doc))]  # type: ignore[attr-defined]
    texts = list(dict.fromkeys(texts))[:120]
    encoder = load_encoder("minilm")
    alone = {text: encoder.encode([text])[0].tobytes() for text in texts}
    shuffled = list(texts)
    random.Random(7).shuffle(shuffled)
    start = 0
    for size in [1, 3, 7, 31, 32, 33, 64] * 3:
        batch = shuffled[start : start + size] or shuffled[:size]
        start = (start + size) % len(shuffled)
        for text, vector in zip(batch, encoder.encode(batch), strict=True):
            assert vector.tobytes() == alone[text], f"batch-dependent vector for {text!r}"


def test_the_encoder_gives_the_same_bytes_whatever_the_thread_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Batches run side by side, one thread each; the thread count changes how texts are cut
    # into batches and which thread runs them, never a vector.
    texts = [str(row["generated_text"]) for row in example_rows()]
    texts += [s for text in texts for s in split_sentences(text)]
    encoder = load_encoder("minilm")
    vectors = []
    for threads in ("1", "2", "3"):
        monkeypatch.setenv("ASSAY_THREADS", threads)
        vectors.append(encoder.encode(texts).tobytes())
    assert vectors[0] == vectors[1] == vectors[2]


async def test_detect_results_are_byte_identical_with_and_without_the_cache() -> None:
    body = rag_body()
    uncached = EmbeddedJudge(encoder=load_encoder("minilm"))
    cached_encoder = CachedEncoder(CountingEncoder(), EmbeddingCache(64 * 2**20))
    cached = EmbeddedJudge(encoder=cached_encoder)
    register_judge("test-uncached", lambda: uncached)
    register_judge("test-cached", lambda: cached)
    items = parse_items(body)
    expected = await detect_items(items, judge="test-uncached")
    # Cold, one item at a time (each call misses only what is new), then warm in one call.
    one_by_one = [(await detect_items([item], judge="test-cached"))[0] for item in items]
    warm = await detect_items(items, judge="test-cached")
    reference = json.dumps(expected, sort_keys=True)
    assert json.dumps(one_by_one, sort_keys=True) == reference
    assert json.dumps(warm, sort_keys=True) == reference
    stats = cached_encoder.cache.stats()
    assert stats.hits > stats.misses  # five answers per question: contexts come back
    assert cached_encoder.encoder.texts == stats.misses  # type: ignore[attr-defined]


def test_a_text_is_encoded_once_and_counted_as_hits_after() -> None:
    counting = CountingEncoder()
    encoder = CachedEncoder(counting, EmbeddingCache(2**20))
    first = encoder.encode(["alpha beta", "gamma", "alpha beta"])
    assert counting.texts == 2
    second = encoder.encode(["gamma", "alpha beta", "delta"])
    assert counting.texts == 3
    assert second[0].tobytes() == first[1].tobytes()
    assert second[1].tobytes() == first[0].tobytes()
    stats = encoder.cache.stats()
    assert (stats.hits, stats.misses) == (2, 3)
    assert stats.hit_rate == 0.4


def test_kind_and_model_are_part_of_the_key() -> None:
    cache = EmbeddingCache(2**20)
    vector = np.ones((1, 384), dtype=np.float32)
    cache.put_many("model-a", "passage", ["text"], vector)
    assert cache.get_many("model-a", "passage", ["text"])[0] is not None
    assert cache.get_many("model-b", "passage", ["text"])[0] is None
    assert cache.get_many("model-a", "query", ["text"])[0] is None


def test_least_recently_used_vectors_are_dropped_beyond_the_bound() -> None:
    cache = EmbeddingCache(3 * entry_bytes(384))
    encoder = CachedEncoder(FakeEncoder(), cache)
    encoder.encode(["one", "two", "three"])
    encoder.encode(["one"])  # now the most recently used
    encoder.encode(["four"])  # evicts "two", the least recently used
    held = cache.get_many("fake", "passage", ["one", "two", "three", "four"], count=False)
    assert [vector is not None for vector in held] == [True, False, True, True]
    assert cache.accounted_bytes <= cache.max_bytes


def test_memory_stays_within_the_bound_however_many_texts_pass() -> None:
    # The bound is what the cache really allocates, not only what it counts: fill a 1 MiB
    # cache with long texts many times over and measure the memory it holds on to.
    bound = 2**20
    cache = EmbeddingCache(bound)
    encoder = CachedEncoder(FakeEncoder(), cache)
    long_tail = " word" * 2000  # a 10,000-character text costs what a short one does
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for start in range(0, 6000, 200):
            encoder.encode([f"text {n}{long_tail}" for n in range(start, start + 200)])
        held = tracemalloc.take_snapshot().compare_to(before, "filename")
    finally:
        tracemalloc.stop()
    growth = sum(stat.size_diff for stat in held)
    assert cache.stats().entries == bound // entry_bytes(384)
    assert cache.accounted_bytes <= bound
    assert growth <= bound, f"cache holds {growth} bytes for a bound of {bound}"


def test_a_zero_bound_turns_caching_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CACHE_MB_ENV, "0")
    counting = CountingEncoder()
    encoder = CachedEncoder(counting)
    encoder.encode(["same"])
    encoder.encode(["same"])
    assert counting.texts == 2
    assert encoder.cache.stats().entries == 0


@pytest.mark.parametrize("value", ["-1", "lots"])
def test_a_bad_bound_is_refused_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(CACHE_MB_ENV, value)
    with pytest.raises(ValueError, match=CACHE_MB_ENV):
        configured_max_bytes()
