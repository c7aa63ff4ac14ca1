"""Run summary of the OOD metric: the 4-way confusion table, over-rejection and missed-refusal
rates with 95% intervals, the mean score with its interval, and the failing cases themselves.

`OODTally` folds result dicts one row at a time (what `score_rows` returns, or the metric's key
of an output line), so `assay ood`, `assay run --metric` and `assay report` summarise any run in
flat memory and print the same numbers.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from assay.metrics.ood.judge import LABELS, Label
from assay.metrics.ood.probe_types import DISALLOWED_TOPIC
from assay.metrics.ood.scorer import RowResult
from assay.stats import Interval, mean_interval, ratio_interval

#: Distinct shortfall warnings a summary keeps (they depend on the profile and config, so few).
MAX_REASONS = 10
#: Failing cases (and flagged probes) a summary lists; all of them are counted.
MAX_LISTED_CASES = 25
#: Characters of a query or reply kept in a listed case.
LISTED_TEXT = 300


@dataclass(frozen=True)
class FailingCase:
    """A case whose behaviour was wrong (an over-rejection or a missed refusal), or a probe the
    judge flagged as possibly mislabelled.

    row_id: the row's input_id; kind: "in_domain", "near_domain" or "far_domain".
    label: the judge's label; query: what was asked; reply: what the system answered.
    probability: the label's probability; topic: where a probe came from.
    """

    row_id: str | None
    kind: str
    label: str
    query: str
    reply: str
    probability: float | None
    topic: str | None = None

    @property
    def shown_kind(self) -> str:
        """The kind as tables show it: "near-domain", and "near-domain, disallowed" for a probe
        of something the profile disallows."""
        shown = self.kind.replace("_", "-")
        disallowed = (self.topic or "").startswith(DISALLOWED_TOPIC)
        return f"{shown}, disallowed" if disallowed else shown


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
    over_rejection_rate: over_rejection / in-scope cases (None without in-scope cases), and
        over_rejection_interval its 95% interval (rows resampled).
    missed_refusal_rate: missed_refusal / out-of-scope cases (None without any), and
        missed_refusal_interval its 95% interval.
    missed_refusal_by_kind: the missed-refusal rate of near-domain and of far-domain probes.
    mean_score, score_interval: mean row score and its 95% bootstrap interval.
    scope_flagged: probes the judge found in scope (possibly mislabelled; not relabelled).
    failing_cases, flagged_cases: the first `MAX_LISTED_CASES` of each.
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
    over_rejection_interval: tuple[float, float] | None = None
    missed_refusal_rate: float | None = None
    missed_refusal_interval: tuple[float, float] | None = None
    missed_refusal_by_kind: dict[str, float | None] = field(default_factory=dict)
    mean_score: float | None = None
    score_interval: tuple[float, float] | None = None
    scope_flagged: int = 0
    failing_cases: list[FailingCase] = field(default_factory=list)
    flagged_cases: list[FailingCase] = field(default_factory=list)


def _rate(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def _pair(interval: Interval | None) -> tuple[float, float] | None:
    return (round(interval.low, 4), round(interval.high, 4)) if interval else None


def _listed(row_id: Any, case: Mapping[str, Any]) -> FailingCase:
    reply = case.get("reply")
    return FailingCase(
        row_id=None if row_id is None else str(row_id),
        kind=str(case.get("kind") or ("in_domain" if case.get("role") == "in_domain" else "probe")),
        label=str(case.get("label")),
        query=str(case.get("query", ""))[:LISTED_TEXT],
        reply="" if reply is None else str(reply)[:LISTED_TEXT],
        probability=case.get("probability"),
        topic=case.get("topic"),
    )


class OODTally:
    """Folds result dicts into an `OODSummary`, one row at a time (see the module doc)."""

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
        # (wrong, judged) per row, for intervals that resample rows.
        self.over_rejections: Counter[tuple[int, int]] = Counter()
        self.missed_refusals: Counter[tuple[int, int]] = Counter()
        self.by_kind: dict[str, list[int]] = {}  # kind -> [missed, out-of-scope cases]
        self.scope_flagged = 0
        self.failing: list[FailingCase] = []
        self.flagged: list[FailingCase] = []

    def add(self, result: Mapping[str, Any], row_id: Any = None) -> None:
        """Count one row's result; `row_id` names it in listed cases (default its input_id)."""
        self.rows += 1
        row_id = result.get("input_id", row_id) if row_id is None else row_id
        raw = result.get("score")
        score = float(raw) if isinstance(raw, int | float) and not isinstance(raw, bool) else None
        scored = score is not None
        over = [0, 0]
        missed = [0, 0]
        for case in result.get("cases") or []:
            self._add_case(case, row_id, over, missed, scored)
        # Rates, like the mean score, are measured on scored rows only: an errored row's
        # judged cases are part of no result (its failures are still counted above).
        if scored:
            self.over_rejections[(over[0], over[1])] += 1
            self.missed_refusals[(missed[0], missed[1])] += 1
        warnings = result.get("warnings") or []
        if warnings:
            self.rows_short_of_probes += 1
        for warning in warnings:
            reason = str(warning)
            if reason not in self.probe_shortfalls and len(self.probe_shortfalls) >= MAX_REASONS:
                reason = "other"
            self.probe_shortfalls[reason] = self.probe_shortfalls.get(reason, 0) + 1
        if score is not None:
            self.rows_scored += 1
            self.score_total += score
            self.score_tally[score] = self.score_tally.get(score, 0) + 1

    def _add_case(
        self, case: Mapping[str, Any], row_id: Any, over: list[int], missed: list[int], scored: bool
    ) -> None:
        fallback = case.get("fallback")
        if fallback:
            self.probe_fallbacks[fallback] = self.probe_fallbacks.get(fallback, 0) + 1
        label = case.get("label")
        if label not in self.confusion:
            if case.get("status") == "transport_error":
                self.transport_failures += 1
            elif case.get("status") == "judge_error":
                self.judge_failures += 1
            return
        if not scored:
            return
        self.confusion[label] += 1
        if label in ("in_domain_answer", "over_rejection"):
            over[0] += label == "over_rejection"
            over[1] += 1
        else:
            missed[0] += label == "missed_refusal"
            missed[1] += 1
            counts = self.by_kind.setdefault(str(case.get("kind") or "probe"), [0, 0])
            counts[0] += label == "missed_refusal"
            counts[1] += 1
        if label in ("over_rejection", "missed_refusal") and len(self.failing) < MAX_LISTED_CASES:
            self.failing.append(_listed(row_id, case))
        if case.get("scope_flagged"):
            self.scope_flagged += 1
            if len(self.flagged) < MAX_LISTED_CASES:
                self.flagged.append(_listed(row_id, case))

    def summary(self) -> OODSummary:
        confusion = self.confusion
        in_scope = confusion["in_domain_answer"] + confusion["over_rejection"]
        off_scope = confusion["correct_refusal"] + confusion["missed_refusal"]
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
            over_rejection_interval=_pair(ratio_interval(self.over_rejections)),
            missed_refusal_rate=_rate(confusion["missed_refusal"], off_scope),
            missed_refusal_interval=_pair(ratio_interval(self.missed_refusals)),
            missed_refusal_by_kind={
                kind: _rate(part, whole) for kind, (part, whole) in sorted(self.by_kind.items())
            },
            mean_score=round(self.score_total / self.rows_scored, 4) if self.rows_scored else None,
            score_interval=_pair(mean_interval(self.score_tally)),
            scope_flagged=self.scope_flagged,
            failing_cases=list(self.failing),
            flagged_cases=list(self.flagged),
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
