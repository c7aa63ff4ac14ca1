"""Run summary of the OOD metric: 4-way confusion counts, error rates, mean score with a CI."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from assay.metrics.ood.judge import LABELS, Label
from assay.metrics.ood.scorer import RowResult
from assay.stats import mean_interval


@dataclass(frozen=True)
class OODSummary:
    """Totals over a run.

    rows, rows_scored, rows_errored: row counts (errored rows have no score).
    cases_judged: (query, reply) pairs that got a label.
    confusion: label -> count over judged cases.
    transport_failures: SUT calls that failed after all retries (not counted as behaviour).
    judge_failures: pairs the judge could not label.
    probe_fallbacks: probes the bank wrote in place of the LLM, by why ("llm_failed": the LLM
        call failed; "llm_short": too few of its probes were out of scope).
    rows_short_of_probes: rows that got fewer probes than num_ood_queries.
    probe_shortfalls: the rows' warnings (how many probes of how many, and why), each with the
        rows it applies to (distinct warnings, at most `MAX_REASONS`; others count as "other").
    over_rejection_rate: over_rejection / in-scope cases (None without in-scope cases).
    missed_refusal_rate: missed_refusal / out-of-scope cases (None without any).
    mean_score: mean row score (None when no row scored).
    score_interval: 95% bootstrap interval of the mean score (`assay.stats.mean_interval`, the
        same seed as every other summary).
    """

    rows: int
    rows_scored: int
    rows_errored: int
    cases_judged: int
    confusion: dict[Label, int] = field(default_factory=dict)
    transport_failures: int = 0
    judge_failures: int = 0
    probe_fallbacks: dict[str, int] = field(default_factory=dict)
    rows_short_of_probes: int = 0
    probe_shortfalls: dict[str, int] = field(default_factory=dict)
    over_rejection_rate: float | None = None
    missed_refusal_rate: float | None = None
    mean_score: float | None = None
    score_interval: tuple[float, float] | None = None


#: Distinct shortfall warnings a summary keeps (they depend on the profile and config, so few).
MAX_REASONS = 10


def _rate(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


class OODTally:
    """Folds result dicts (`RowResult.to_dict()`, or the metric's key in an output line) into an
    `OODSummary`, one row at a time, so a run of any size is summarised in flat memory."""

    def __init__(self) -> None:
        self.rows = 0
        self.rows_scored = 0
        self.confusion: dict[Label, int] = dict.fromkeys(LABELS, 0)
        self.transport_failures = 0
        self.judge_failures = 0
        self.probe_fallbacks: dict[str, int] = {}
        self.rows_short_of_probes = 0
        self.probe_shortfalls: dict[str, int] = {}
        self.score_total = 0.0
        self.score_tally: dict[float, int] = {}

    def add(self, result: Mapping[str, Any]) -> None:
        """Count one row's result."""
        self.rows += 1
        for case in result.get("cases") or []:
            fallback = case.get("fallback")
            if fallback:
                self.probe_fallbacks[fallback] = self.probe_fallbacks.get(fallback, 0) + 1
            label = case.get("label")
            if label in self.confusion:
                self.confusion[label] += 1
            elif case.get("status") == "transport_error":
                self.transport_failures += 1
            elif case.get("status") == "judge_error":
                self.judge_failures += 1
        warnings = result.get("warnings") or []
        if warnings:
            self.rows_short_of_probes += 1
        for warning in warnings:
            reason = str(warning)
            if reason not in self.probe_shortfalls and len(self.probe_shortfalls) >= MAX_REASONS:
                reason = "other"
            self.probe_shortfalls[reason] = self.probe_shortfalls.get(reason, 0) + 1
        score = result.get("score")
        if isinstance(score, int | float) and not isinstance(score, bool):
            self.rows_scored += 1
            self.score_total += score
            self.score_tally[float(score)] = self.score_tally.get(float(score), 0) + 1

    def summary(self) -> OODSummary:
        confusion = self.confusion
        in_scope = confusion["in_domain_answer"] + confusion["over_rejection"]
        off_scope = confusion["correct_refusal"] + confusion["missed_refusal"]
        interval = mean_interval(self.score_tally)
        return OODSummary(
            rows=self.rows,
            rows_scored=self.rows_scored,
            rows_errored=self.rows - self.rows_scored,
            cases_judged=sum(confusion.values()),
            confusion=dict(confusion),
            transport_failures=self.transport_failures,
            judge_failures=self.judge_failures,
            probe_fallbacks=dict(self.probe_fallbacks),
            rows_short_of_probes=self.rows_short_of_probes,
            probe_shortfalls=dict(self.probe_shortfalls),
            over_rejection_rate=_rate(confusion["over_rejection"], in_scope),
            missed_refusal_rate=_rate(confusion["missed_refusal"], off_scope),
            mean_score=round(self.score_total / self.rows_scored, 4) if self.rows_scored else None,
            score_interval=(round(interval.low, 4), round(interval.high, 4)) if interval else None,
        )

    def to_dict(self) -> dict[str, Any]:
        """The summary as JSON-ready data (for a run's summary file)."""
        return asdict(self.summary())


def summarize(results: Sequence[RowResult]) -> OODSummary:
    """Summarise scored rows (what `score_rows` returned)."""
    tally = OODTally()
    for result in results:
        tally.add(result.to_dict())
    return tally.summary()
