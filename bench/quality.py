"""Quality of the shipped detectors on the dev data in ../shared/data.

Runs every row through the real detector path (`detect_items`, embedded judge, shipped
calibration) and prints:
- output_relevance on haluquestqa/relevance.jsonl: AUROC (positive = no expert-flagged irrelevant
  span) of the score and of the mean follow_probability, Spearman of each with `label`;
- completeness: AUROC on haluquestqa/completeness.jsonl (question as context) and pairwise
  accuracy on ragchecker_meta_eval non-tie pairs (reference answer as context);
- expected calibration error of every follow_probability against its row's binary label.
These figures are IN-SAMPLE: the shipped calibration and agreement model were fitted on these
same rows. The figures to trust are the out-of-fold ones of `bench/calibrate.py` and
`bench/sanity.py`; this script checks that the shipped judge, end to end, behaves like them.

    python bench/quality.py [--limit N]
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy.stats import spearmanr
from sklearn.metrics import roc_auc_score

import common
from assay.detectors.evaluate import detect_items, parse_item

BATCH = 32


def score_rows(
    detector: str, rows: Sequence[tuple[str | None, str, Sequence[str]]]
) -> list[dict[str, Any]]:
    """The wire result of `detector` for each (query, response, context) row."""
    results: list[dict[str, Any]] = []
    for start in range(0, len(rows), BATCH):
        items = [
            parse_item(
                {
                    "user_query": query,
                    "generated_text": response,
                    "context": list(context) or None,
                    "config": {detector: {"detector_name": "default"}},
                }
            )
            for query, response, context in rows[start : start + BATCH]
        ]
        results += [r[detector] for r in asyncio.run(detect_items(items))]
    return results


def probabilities(result: dict[str, Any]) -> list[float]:
    return [i["follow_probability"] for i in result["instructions_list"]]


def mean_probability(result: dict[str, Any]) -> float:
    return float(np.mean(probabilities(result)))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--limit", type=int, default=0, help="use only the first N rows of each file"
    )
    args = parser.parse_args()
    cut = slice(0, args.limit or None)
    table: list[tuple[str, str, str, str]] = []
    ece_probs: list[float] = []
    ece_outcomes: list[float] = []

    rel = common.relevance_rows()[cut]
    rel_results = score_rows(
        "output_relevance", [(r["query"], r["response"], r["context"]) for r in rel]
    )
    positive = np.array([r["positive"] for r in rel])
    gold = np.array([r["label"] for r in rel])
    scores = np.array([r["score"] for r in rel_results])
    means = np.array([mean_probability(r) for r in rel_results])
    table += [
        (
            "output_relevance",
            "haluquestqa/relevance",
            "AUROC of score",
            f"{roc_auc_score(positive, scores):.3f}",
        ),
        (
            "output_relevance",
            "haluquestqa/relevance",
            "AUROC of mean follow_probability",
            f"{roc_auc_score(positive, means):.3f}",
        ),
        (
            "output_relevance",
            "haluquestqa/relevance",
            "Spearman(score, label)",
            f"{spearmanr(scores, gold)[0]:.3f}",
        ),
        (
            "output_relevance",
            "haluquestqa/relevance",
            "Spearman(mean probability, label)",
            f"{spearmanr(means, gold)[0]:.3f}",
        ),
    ]
    for result, outcome in zip(rel_results, positive, strict=True):
        ece_probs += probabilities(result)
        ece_outcomes += [float(outcome)] * 4

    comp = common.completeness_rows()[cut]
    comp_results = score_rows(
        "completeness", [(r["query"], r["response"], r["context"]) for r in comp]
    )
    positive = np.array([r["positive"] for r in comp])
    scores = np.array([r["score"] for r in comp_results])
    means = np.array([mean_probability(r) for r in comp_results])
    table += [
        (
            "completeness",
            "haluquestqa/completeness",
            "AUROC of score",
            f"{roc_auc_score(positive, scores):.3f}",
        ),
        (
            "completeness",
            "haluquestqa/completeness",
            "AUROC of mean follow_probability",
            f"{roc_auc_score(positive, means):.3f}",
        ),
    ]
    for result, outcome in zip(comp_results, positive, strict=True):
        ece_probs += probabilities(result)
        ece_outcomes += [float(outcome)] * 8

    pairs = [p for p in common.pairwise_rows() if p["label"] != 0][cut]
    a = score_rows("completeness", [(p["query"], p["a"], p["context"]) for p in pairs])
    b = score_rows("completeness", [(p["query"], p["b"], p["context"]) for p in pairs])
    b_wins = np.array([p["label"] > 0 for p in pairs])
    score_a, score_b = np.array([r["score"] for r in a]), np.array([r["score"] for r in b])
    mean_a, mean_b = (
        np.array([mean_probability(r) for r in a]),
        np.array([mean_probability(r) for r in b]),
    )
    decided = score_a != score_b
    tie_broken = np.where(decided, score_b > score_a, mean_b > mean_a)
    correct = np.where(b_wins, score_b > score_a, score_a > score_b)
    table += [
        (
            "completeness",
            "ragchecker pairs",
            "pairwise accuracy, score (ties count 0.5)",
            f"{(correct + 0.5 * ~decided).mean():.3f}",
        ),
        (
            "completeness",
            "ragchecker pairs",
            "pairwise accuracy, score (ties broken by mean probability)",
            f"{(tie_broken == b_wins).mean():.3f}",
        ),
        (
            "completeness",
            "ragchecker pairs",
            "pairwise accuracy, score, decided pairs only",
            f"{((score_b > score_a) == b_wins)[decided].mean():.3f} ({decided.sum()}/{len(pairs)} decided)",
        ),
        (
            "completeness",
            "ragchecker pairs",
            "pairwise accuracy, mean follow_probability",
            f"{((mean_b > mean_a) == b_wins).mean():.3f}",
        ),
    ]
    for result, outcome in [*zip(a, ~b_wins, strict=True), *zip(b, b_wins, strict=True)]:
        ece_probs += probabilities(result)
        ece_outcomes += [float(outcome)] * 8

    ece = common.expected_calibration_error(np.array(ece_probs), np.array(ece_outcomes))
    table.append(("both", "all of the above", "ECE of follow_probability (10 bins)", f"{ece:.3f}"))
    lines = ["| detector | data | measure | value |", "|---|---|---|---|"]
    lines += [f"| {d} | {s} | {m} | {v} |" for d, s, m, v in table]
    text = "\n".join(lines)
    print(text)
    rows = f"{len(rel)} relevance rows, {len(comp)} completeness rows, {len(pairs)} non-tie pairs"
    common.write_section(
        "Quality in-sample (shipped judge on the rows it was fitted on)",
        f"`python bench/quality.py` — {rows}, through the real detector path (`detect_items`). "
        "**In-sample**: the shipped calibration and agreement model were fitted on these rows, "
        "so these figures are optimistic; the out-of-fold figures are in the calibration and "
        "sanity sections.\n\n" + text,
    )


if __name__ == "__main__":
    main()
