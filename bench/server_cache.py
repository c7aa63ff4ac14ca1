"""The embedding cache's case for bench/server.py: rows/s with the cache on and off, on a RAG
evaluation where five answers share each question and context, and on rows that never repeat.

Both workloads are ragchecker questions with their reference as context, scored by both
detectors, one item per request from concurrent clients. In the five-answer workload each
question is answered by its own two answers and three answers taken from other rows (each text
used once, so only the question and context repeat), sent system by system as several systems'
runs would be; the no-repeat workload sends each question once.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

import common
from assay.detectors import DETECTORS
from assay.detectors.evaluate import parse_item, questions_for
from assay.judges.embedded.agreement_model import load_agreement_model
from assay.judges.embedded.embedding_cache import (
    CACHE_MB_ENV,
    CachedEncoder,
    EmbeddingCache,
)
from assay.judges.embedded.encoder import load_encoder
from assay.judges.embedded.judge import EmbeddedJudge
from assay.server.process import ServerProcess

ANSWERS_PER_QUESTION = 5


def _item(query: str, context: list[str], answer: str) -> list[dict[str, Any]]:
    return [
        {
            "user_query": query,
            "context": context,
            "generated_text": answer,
            "config": {"output_relevance": {}, "completeness": {}},
        }
    ]


def distinct_questions() -> list[dict[str, Any]]:
    """ragchecker pairs, one per question (the data has each pair once per annotator)."""
    rows: dict[str, dict[str, Any]] = {}
    for row in common.pairwise_rows():
        rows.setdefault(row["query"], row)
    return list(rows.values())


def five_answer_bodies(questions: int) -> list[list[dict[str, Any]]]:
    """`questions` questions × 5 answers, in system order (all of system 1's rows first)."""
    rows = distinct_questions()
    spare = list(dict.fromkeys(t for row in rows[questions:] for t in (row["a"], row["b"])))
    if len(spare) < questions * (ANSWERS_PER_QUESTION - 2):
        raise SystemExit(f"not enough rows for {questions} questions")
    answers = [[rows[q]["a"], rows[q]["b"], *spare[q * 3 : q * 3 + 3]] for q in range(questions)]
    return [
        _item(rows[q]["query"], list(rows[q]["context"]), answers[q][system])
        for system in range(ANSWERS_PER_QUESTION)
        for q in range(questions)
    ]


def no_repeat_bodies(count: int) -> list[list[dict[str, Any]]]:
    """`count` rows, each question once."""
    rows = distinct_questions()[:count]
    return [_item(row["query"], list(row["context"]), row["a"]) for row in rows]


def _rate(url: str, api_key: str, bodies: list[list[dict[str, Any]]], clients: int) -> float:
    """Rows/s posting every body once, in order, from `clients` concurrent senders."""
    figures = asyncio.run(common.post_detect(url, api_key, bodies, clients))
    if figures["errors"]:
        raise SystemExit(f"{figures['errors']:.0f} requests failed")
    return figures["rps"]


def _health(url: str) -> dict[str, Any]:
    cache: dict[str, Any] = httpx.get(url + "/healthz", timeout=30).json()["embedding_cache"]
    return cache


def measure(
    api_key: str, workloads: dict[str, list[list[dict[str, Any]]]], clients: int
) -> dict[str, dict[str, Any]]:
    """Per workload: rows/s with the cache off and on (a fresh server each), and the hit rate."""
    figures: dict[str, dict[str, Any]] = {}
    # Warm-up rows from another data set, so that they share no text with either workload.
    warm_up = [
        [
            {
                "user_query": row["query"],
                "generated_text": row["response"],
                "config": {"output_relevance": {}},
            }
        ]
        for row in common.relevance_rows()[:8]
    ]
    for name, bodies in workloads.items():
        figures[name] = {"rows": len(bodies)}
        for setting, megabytes in (("off", "0"), ("on", "64")):
            with tempfile.TemporaryDirectory() as folder:
                server = ServerProcess(
                    f"sqlite:///{Path(folder) / 'bench.db'}",
                    Path(folder) / "server.log",
                    api_keys=[api_key],
                    environment={CACHE_MB_ENV: megabytes},
                )
                with server:
                    _rate(server.url, api_key, warm_up, clients)
                    before = _health(server.url)
                    figures[name][setting] = _rate(server.url, api_key, bodies, clients)
                    after = _health(server.url)
            if setting == "on":
                hits = after["hits"] - before["hits"]
                lookups = hits + after["misses"] - before["misses"]
                figures[name]["hit_rate"] = hits / lookups if lookups else 0.0
        figures[name]["ratio"] = figures[name]["on"] / figures[name]["off"]
    return figures


def table(figures: dict[str, dict[str, Any]]) -> str:
    lines = [
        "| workload | rows | rows/s, cache off | rows/s, cache on | on ÷ off | hit rate |",
        "|---|---|---|---|---|---|",
    ]
    for name, numbers in figures.items():
        lines.append(
            f"| {name} | {numbers['rows']} | {numbers['off']:.1f} | {numbers['on']:.1f} | "
            f"{numbers['ratio']:.2f}× | {numbers['hit_rate']:.0%} |"
        )
    return "\n".join(lines)


class _TimedAgreement:
    """The shipped agreement model, adding up the time its calls take."""

    def __init__(self) -> None:
        self.model = load_agreement_model()
        self.seconds = 0.0

    def predict(self, pairs: Any) -> Any:
        started = time.perf_counter()
        try:
            return self.model.predict(pairs)
        finally:
            self.seconds += time.perf_counter() - started


def row_costs(bodies: list[list[dict[str, Any]]]) -> dict[str, float]:
    """Milliseconds per row in this process, rows judged one at a time: with the cache off, on,
    and the part of "on" spent by the agreement model reading sentence pairs. Each pair holds one
    answer's sentence, so no cache saves it: it bounds what caching can give."""
    questions = [
        [q for name in item.config for q in questions_for(item, DETECTORS[name])]
        for item in (parse_item(body[0]) for body in bodies)
    ]
    figures: dict[str, float] = {}
    for setting, megabytes in (("off", 0), ("on", 64)):
        agreement = _TimedAgreement()
        encoder = CachedEncoder(load_encoder(), EmbeddingCache(megabytes << 20))
        judge = EmbeddedJudge(encoder=encoder, agreement=agreement)  # type: ignore[arg-type]
        judge.answer_sync(questions[0])  # load the models first
        agreement.seconds = 0.0
        started = time.perf_counter()
        for row in questions[1:]:
            judge.answer_sync(row)
        figures[setting] = (time.perf_counter() - started) * 1000 / (len(questions) - 1)
        figures[f"agreement_{setting}"] = agreement.seconds * 1000 / (len(questions) - 1)
    return figures


def cost_table(costs: dict[str, float]) -> str:
    off, on, pairs = costs["off"], costs["on"], costs["agreement_on"]
    return "\n".join(
        [
            '| ms per row, cache off | ms per row, cache on | off ÷ on | of "on": agreement '
            'model (sentence pairs) | of "on": the rest (the answer\'s own sentences, features) |',
            "|---|---|---|---|---|",
            f"| {off:.0f} | {on:.0f} | {off / on:.2f}× | {pairs:.0f} | {on - pairs:.0f} |",
        ]
    )
