"""The report's numbers, computed once from a folded run and shared by HTML and terminal views."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from assay import stats
from assay.report.collect import ExampleRow, RejectedRow, RunTally, ScorerTally
from assay.runner.gates import GateFigures, gate_passed

if TYPE_CHECKING:
    from assay.metrics.ood.summary import OODSummary


@dataclass(frozen=True)
class InstructionRow:
    """One instruction of a scorer: how often it failed and its mean follow_probability."""

    instruction: str
    failed: int
    answered: int
    mean_probability: float

    @property
    def failure_rate(self) -> float:
        return self.failed / self.answered if self.answered else 0.0


@dataclass(frozen=True)
class GoldFigures:
    """How a scorer's score agrees with the gold labels (only when rows carry them).

    positives / negatives: labelled rows whose gold label is true / false.
    auroc: area under the ROC curve (None unless both classes occur), with its interval.
    curve: reliability-curve bins; ece: their row-weighted mean gap.
    """

    positives: int
    negatives: int
    auroc: float | None
    auroc_interval: stats.Interval | None
    curve: list[stats.CalibrationBin]
    ece: float | None


@dataclass(frozen=True)
class ScorerReport:
    """Everything shown for one detector or metric (`ood`: the OOD metric's own summary)."""

    name: str
    rows_scored: int
    rows_errored: int
    errors: dict[str, int]
    mean: float | None
    mean_interval: stats.Interval | None
    histogram: list[int]
    instructions: list[InstructionRow]
    lowest_rows: list[ExampleRow]
    gold: GoldFigures | None
    threshold: float | None = None
    figures: GateFigures | None = None
    ood: OODSummary | None = None
    scale: stats.ScoreScale = stats.UNIT_SCALE

    @property
    def gate_failed(self) -> bool:
        """True when a `--fail-under` threshold applies and its gate fails (the mean, counting
        rows the scorer could not score as failures, is missing or below it)."""
        if self.threshold is None:
            return False
        return not gate_passed(self.figures, self.threshold)

    @property
    def gate_label(self) -> str:
        """The gate cell: "≥ 0.8", "below 0.8", and the figure compared when rows the scorer
        could not score made it differ from the mean shown beside it."""
        if self.threshold is None:
            return "–"
        verdict = f"below {self.threshold:g}" if self.gate_failed else f"≥ {self.threshold:g}"
        figures = self.figures
        if figures is None or not figures.rows_unscored or figures.gated_mean is None:
            return verdict
        unscored = figures.rows_unscored
        rows = "row" if unscored == 1 else "rows"
        return f"{verdict} ({figures.gated_mean:.3f} with {unscored} unscored {rows} as 0)"


@dataclass
class Report:
    """The whole report.

    source: the output file the report was made from.
    rows / rows_rejected: output lines, and those not scored as a whole (rejected before
        scoring, or timed out or failed).
    rejected: field (with the kind of failure, "row: timeout", for a row that was not rejected)
        -> such rows; rejected_examples: the first few of them.
    scorers: per detector or metric, in the order first seen.
    gold_column: the gold-label column used, if any; unreadable_labels and unreadable_example
        say how many labels could not be read as yes/no and show one.
    gate_messages: why `--fail-under` failed (empty when it passed or was not asked for).
    """

    source: str
    rows: int
    rows_rejected: int
    rejected: dict[str, int]
    rejected_examples: list[RejectedRow]
    scorers: list[ScorerReport]
    gold_column: str | None
    unreadable_labels: int
    unreadable_example: str | None
    gate_messages: list[str] = field(default_factory=list)


def _gold_figures(tally: ScorerTally) -> GoldFigures | None:
    positives, negatives = sum(tally.positive.values()), sum(tally.negative.values())
    if not positives + negatives:
        return None
    curve = stats.calibration_curve(tally.positive, tally.negative)
    return GoldFigures(
        positives=positives,
        negatives=negatives,
        auroc=stats.auroc(tally.positive, tally.negative),
        auroc_interval=stats.auroc_interval(tally.positive, tally.negative),
        curve=curve,
        ece=stats.expected_calibration_error(curve),
    )


def scorer_report(
    tally: ScorerTally, threshold: float | None = None, figures: GateFigures | None = None
) -> ScorerReport:
    """Compute one scorer's figures from its tally; `threshold` is its `--fail-under`, if any,
    and `figures` what that gate checks."""
    return ScorerReport(
        name=tally.name,
        rows_scored=tally.rows_scored,
        rows_errored=tally.rows_errored,
        errors=dict(tally.errors.most_common()),
        mean=stats.mean(tally.scores),
        mean_interval=stats.mean_interval(tally.scores),
        histogram=stats.histogram(tally.scores, scale=tally.scale),
        instructions=[
            InstructionRow(text, counts.failed, counts.answered, counts.mean_probability)
            for text, counts in tally.instructions.items()
        ],
        lowest_rows=tally.lowest_rows(),
        gold=_gold_figures(tally),
        threshold=threshold,
        figures=figures,
        ood=tally.ood.summary() if tally.ood is not None else None,
        scale=tally.scale,
    )


def build_report(
    tally: RunTally,
    source: str,
    thresholds: Mapping[str, float] | None = None,
    gate_messages: list[str] | None = None,
) -> Report:
    """Turn a folded run into the report.

    tally: the folded output (see `collect.collect`).
    source: the output file's path, shown in the report.
    thresholds: `--fail-under` thresholds by scorer name, shown next to each mean.
    gate_messages: the gate failures to show at the top (see `assay.runner.gates`).
    """
    thresholds = thresholds or {}
    figures = tally.gate_figures()
    return Report(
        source=source,
        rows=tally.rows,
        rows_rejected=tally.rows_rejected,
        rejected=dict(tally.rejected.most_common()),
        rejected_examples=list(tally.rejected_examples),
        scorers=[
            scorer_report(s, thresholds.get(name), figures.get(name))
            for name, s in tally.scorers.items()
        ],
        gold_column=tally.gold_column,
        unreadable_labels=tally.unreadable_labels,
        unreadable_example=tally.unreadable_example,
        gate_messages=list(gate_messages or []),
    )
