"""Terminal tables of an `llm.ood_detection` run: the 4-way behaviour table, the error rates
with their 95% intervals, and the failing cases. `assay ood`, `assay run --metric` and
`assay report` print these same tables."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:  # the metric's modules load only when an OOD run is reported
    from assay.metrics.ood.summary import OODSummary

#: Characters of a reply shown in the failing-cases table.
REPLY_CHARS = 160


def _figure(value: float | None, interval: tuple[float, float] | None = None) -> str:
    if value is None:
        return "–"
    return f"{value:.3f}" + (f" ({interval[0]:.3f}–{interval[1]:.3f})" if interval else "")


def ood_tables(summary: OODSummary, title: str) -> list[Table]:
    """The tables for one OOD summary, in printing order (failing cases only when there are)."""
    confusion = summary.confusion
    four_way = Table(title=f"{title}: behaviour on {summary.cases_judged} judged cases")
    four_way.add_column("query is", style="bold")
    four_way.add_column("system answered", justify="right")
    four_way.add_column("system declined", justify="right")
    four_way.add_row(
        "in scope",
        Text(f"{confusion.get('in_domain_answer', 0)} in_domain_answer", "green"),
        Text(f"{confusion.get('over_rejection', 0)} over_rejection", "red"),
    )
    four_way.add_row(
        "out of scope",
        Text(f"{confusion.get('missed_refusal', 0)} missed_refusal", "red"),
        Text(f"{confusion.get('correct_refusal', 0)} correct_refusal", "green"),
    )
    figures = Table(title=f"{title}: figures (95% intervals resample rows)")
    figures.add_column("measure", style="bold")
    figures.add_column("value", justify="right")
    figures.add_row("rows scored / errored", f"{summary.rows_scored} / {summary.rows_errored}")
    figures.add_row("mean score", _figure(summary.mean_score, summary.score_interval))
    figures.add_row(
        "over-rejection rate",
        _figure(summary.over_rejection_rate, summary.over_rejection_interval),
    )
    figures.add_row(
        "missed-refusal rate",
        _figure(summary.missed_refusal_rate, summary.missed_refusal_interval),
    )
    for kind, rate in summary.missed_refusal_by_kind.items():
        figures.add_row(f"  of {kind.replace('_', '-')} probes", _figure(rate))
    figures.add_row("transport failures", str(summary.transport_failures))
    figures.add_row("judge failures", str(summary.judge_failures))
    figures.add_row("probes the judge finds in scope", str(summary.scope_flagged))
    tables = [four_way, figures]
    if summary.failing_cases:
        total = confusion.get("over_rejection", 0) + confusion.get("missed_refusal", 0)
        shown = len(summary.failing_cases)
        count = f" ({shown} of {total} shown)" if shown < total else ""
        failing = Table(title=f"{title}: failing cases{count}")
        for column in ("row", "kind", "verdict", "query", "reply"):
            failing.add_column(column, overflow="fold")
        for case in summary.failing_cases:
            failing.add_row(
                case.row_id or "",
                case.shown_kind,
                Text(case.label, "red"),
                case.query,
                case.reply[:REPLY_CHARS],
            )
        tables.append(failing)
    return tables
