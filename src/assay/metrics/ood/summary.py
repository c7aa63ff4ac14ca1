"""Run summary of the OOD metric: 4-way confusion counts, error rates, mean score with a CI."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from assay.metrics.ood.judge import LABELS, Label
from assay.metrics.ood.scorer import RowResult


@dataclass(frozen=True)
class OODSummary:
    """Totals over a run.

    rows, rows_scored, rows_errored: row counts (errored rows have no score).
    cases_judged: (query, reply) pairs that got a label.
    confusion: label -> count over judged cases.
    transport_failures: SUT calls that failed after all retries (not counted as behaviour).
    judge_failures: pairs the judge could not label.
    over_rejection_rate: over_rejection / in-scope cases (None without in-scope cases).
    missed_refusal_rate: missed_refusal / out-of-scope cases (None without any).
    mean_score: mean row score (None when no row scored).
    score_interval: 95% bootstrap interval of the mean score.
    """

    rows: int
    rows_scored: int
    rows_errored: int
    cases_judged: int
    confusion: dict[Label, int] = field(default_factory=dict)
    transport_failures: int = 0
    judge_failures: int = 0
    over_rejection_rate: float | None = None
    missed_refusal_rate: float | None = None
    mean_score: float | None = None
    score_interval: tuple[float, float] | None = None


def bootstrap_interval(
    values: Sequence[float], resamples: int = 2000, seed: int = 0, level: float = 0.95
) -> tuple[float, float] | None:
    """Percentile bootstrap interval of the mean.

    values: the per-row scores.
    resamples: bootstrap resamples.
    seed: seeds the resampling so the interval is reproducible.
    level: coverage, e.g. 0.95.
    """
    if not values:
        return None
    rng = random.Random(seed)
    n = len(values)
    means = sorted(sum(rng.choices(values, k=n)) / n for _ in range(resamples))
    tail = (1 - level) / 2
    low = means[int(tail * (resamples - 1))]
    high = means[int((1 - tail) * (resamples - 1))]
    return round(low, 4), round(high, 4)


def _rate(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def summarize(results: Sequence[RowResult], resamples: int = 2000, seed: int = 0) -> OODSummary:
    """Summarise scored rows.

    results: what score_rows returned.
    resamples, seed: for the bootstrap interval of the mean score.
    """
    confusion: dict[Label, int] = dict.fromkeys(LABELS, 0)
    transport = judge_failed = 0
    for result in results:
        for case in result.cases:
            if case.label is not None:
                confusion[case.label] += 1
            elif case.status == "transport_error":
                transport += 1
            elif case.status == "judge_error":
                judge_failed += 1
    scores = [r.score for r in results if r.score is not None]
    in_scope = confusion["in_domain_answer"] + confusion["over_rejection"]
    off_scope = confusion["correct_refusal"] + confusion["missed_refusal"]
    return OODSummary(
        rows=len(results),
        rows_scored=len(scores),
        rows_errored=len(results) - len(scores),
        cases_judged=sum(confusion.values()),
        confusion=confusion,
        transport_failures=transport,
        judge_failures=judge_failed,
        over_rejection_rate=_rate(confusion["over_rejection"], in_scope),
        missed_refusal_rate=_rate(confusion["missed_refusal"], off_scope),
        mean_score=round(sum(scores) / len(scores), 4) if scores else None,
        score_interval=bootstrap_interval(scores, resamples, seed),
    )
