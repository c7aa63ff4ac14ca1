"""Shared helpers for the benchmarks: locate ../shared/data, load rows, compute features.

The data is never copied into this repository. Set ASSAY_DATA_DIR (or pass --data) to point
elsewhere; benchmarks skip cleanly when the folder is absent.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from assay.detectors import DETECTORS
from assay.judges.base import Question
from assay.judges.embedded import signals, text
from assay.judges.embedded.encoder import Encoder
from assay.judges.embedded.judge import gather
from encoders import bench_encoder

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "bench" / ".cache"
RESULTS = ROOT / "bench" / "RESULTS.md"


def data_dir() -> Path:
    return Path(os.environ.get("ASSAY_DATA_DIR", ROOT.parent / "shared" / "data"))


def require_data() -> Path:
    directory = data_dir()
    if not (directory / "haluquestqa").is_dir():
        print(f"skipped: dev data not found at {directory} (set ASSAY_DATA_DIR)")
        sys.exit(0)
    return directory


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def relevance_rows() -> list[dict[str, Any]]:
    """haluquestqa relevance: positive = no expert-flagged irrelevant span."""
    rows = read_jsonl(require_data() / "haluquestqa" / "relevance.jsonl")
    return [
        {
            "query": r["query"],
            "response": r["response"],
            "context": (),
            "positive": not r["meta"]["derived_has_irrelevant_span"],
            "label": r["label"],
        }
        for r in rows
    ]


def completeness_rows() -> list[dict[str, Any]]:
    """haluquestqa completeness (no documents exist: the question stands in as context)."""
    rows = read_jsonl(require_data() / "haluquestqa" / "completeness.jsonl")
    return [
        {
            "query": r["query"],
            "response": r["response"],
            "context": (r["query"],),
            "positive": not r["meta"]["derived_has_incomplete_span"],
            "label": r["label"],
        }
        for r in rows
    ]


def pairwise_rows() -> list[dict[str, Any]]:
    """ragchecker pairs with the reference answer as context; label > 0: response_b more complete.

    Pairs where either response is blank are left out: the detectors reject an empty
    `generated_text` as bad input rather than scoring it.
    """
    rows = read_jsonl(require_data() / "ragchecker_meta_eval" / "human_pairwise.jsonl")
    rows = [r for r in rows if r["response"].strip() and r["response_b"].strip()]
    return [
        {
            "query": r["query"],
            "a": r["response"],
            "b": r["response_b"],
            "context": (r["context"],),
            "label": r["label"],
        }
        for r in rows
    ]


def questions(
    detector: str, query: str | None, response: str, context: Sequence[str]
) -> list[Question]:
    return [
        Question(
            detector=detector,
            check=instruction.check,
            instruction=instruction.text,
            generated_text=response,
            user_query=query,
            context=tuple(context),
        )
        for instruction in DETECTORS[detector].instructions
    ]


def features(
    encoder_name: str, detector: str, items: Iterable[tuple[str | None, str, Sequence[str]]]
) -> list[dict[str, float]]:
    """Evidence features for each (query, response, context), cached on disk per encoder."""
    items = list(items)
    # The key covers the feature code too, so editing a feature never reads stale numbers.
    code = "".join(Path(module.__file__ or "").read_text() for module in (signals, text))
    digest = hashlib.sha256(json.dumps([encoder_name, detector, items, code]).encode()).hexdigest()[
        :16
    ]
    cache_file = CACHE / f"{detector}-{encoder_name}-{digest}.json"
    if cache_file.exists():
        cached: list[dict[str, float]] = json.loads(cache_file.read_text())
        return cached
    encoder: Encoder = bench_encoder(encoder_name)
    out: list[dict[str, float]] = []
    for start in range(0, len(items), 32):
        batch = items[start : start + 32]
        qs = [
            q for query, response, ctx in batch for q in questions(detector, query, response, ctx)
        ]
        evidence = gather(encoder, qs)
        for query, response, ctx in batch:
            out.append(dict(evidence[(response, query, tuple(ctx))].features))
        print(
            f"  {detector}/{encoder_name}: {len(out)}/{len(items)} rows", file=sys.stderr, end="\r"
        )
    print(file=sys.stderr)
    CACHE.mkdir(parents=True, exist_ok=True)
    cache_file.write_text(json.dumps(out))
    return out


def matrix(rows: list[dict[str, float]], names: Sequence[str]) -> np.ndarray:
    return np.array([[row[name] for name in names] for row in rows], dtype=np.float64)


def expected_calibration_error(
    probabilities: np.ndarray, outcomes: np.ndarray, bins: int = 10
) -> float:
    """ECE with equal-width bins: the weighted gap between confidence and observed frequency."""
    edges = np.linspace(0.0, 1.0, bins + 1)
    which = np.clip(np.digitize(probabilities, edges[1:-1]), 0, bins - 1)
    total = 0.0
    for b in range(bins):
        mask = which == b
        if mask.any():
            total += mask.mean() * abs(probabilities[mask].mean() - outcomes[mask].mean())
    return float(total)


def write_section(title: str, body: str) -> None:
    """Replace (or add) the section `## title` in bench/RESULTS.md."""
    text = RESULTS.read_text() if RESULTS.exists() else "# Benchmark results\n"
    marker = f"## {title}\n"
    section = f"{marker}\n{body.strip()}\n\n"
    if marker in text:
        start = text.index(marker)
        end = text.find("\n## ", start + len(marker))
        text = text[:start] + section + (text[end + 1 :] if end != -1 else "")
    else:
        text = text.rstrip() + "\n\n" + section
    RESULTS.write_text(text.rstrip() + "\n")
