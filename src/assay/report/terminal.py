"""The report's terminal summary: rich tables of the same numbers the HTML page shows."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from assay.report.model import Report, ScorerReport
from assay.stats import Interval


def _number(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def _with_interval(value: float | None, interval: Interval | None) -> str:
    """`0.787 (0.64–0.93)`: a figure with its 95% interval, short enough for 80 columns."""
    if value is None:
        return "–"
    if interval is None:
        return f"{value:.3f}"
    return f"{value:.3f} ({interval.low:.2f}–{interval.high:.2f})"


def _gate(scorer: ScorerReport) -> Text:
    if scorer.threshold is None:
        return Text("–")
    if scorer.gate_failed:
        return Text(f"below {scorer.threshold:g}", style="bold red")
    return Text(f"≥ {scorer.threshold:g}", style="green")


def overview_table(report: Report) -> Table:
    """One row per detector or metric: counts, mean with its interval, gate, AUROC."""
    gated = any(s.threshold is not None for s in report.scorers)
    with_gold = any(s.gold is not None for s in report.scorers)
    table = Table(title=f"{report.rows} rows in {report.source}")
    table.add_column("scorer", style="bold", no_wrap=True)
    table.add_column("scored", justify="right")
    table.add_column("errors", justify="right")
    # Figures and their intervals may wrap onto two lines in a narrow terminal.
    table.add_column("mean (95%)", justify="right", min_width=5)
    if gated:
        table.add_column("gate", justify="right", no_wrap=True)
    if with_gold:
        table.add_column("AUROC (95%)", justify="right", min_width=5)
        table.add_column("ECE", justify="right")
    for s in report.scorers:
        cells: list[str | Text] = [
            s.name,
            str(s.rows_scored),
            Text(str(s.rows_errored), style="red" if s.rows_errored else ""),
            _with_interval(s.mean, s.mean_interval),
        ]
        if gated:
            cells.append(_gate(s))
        if with_gold:
            gold = s.gold
            cells.append(_with_interval(gold.auroc, gold.auroc_interval) if gold else "–")
            cells.append(_number(gold.ece if gold else None))
        table.add_row(*cells)
    return table


def instruction_table(report: Report) -> Table:
    """Per scorer and instruction: how many rows failed it."""
    table = Table(title="instructions not followed")
    table.add_column("scorer", style="bold", no_wrap=True)
    table.add_column("instruction")
    table.add_column("failed", justify="right")
    table.add_column("rate", justify="right")
    for s in report.scorers:
        for i in s.instructions:
            style = "red" if i.failure_rate >= 0.5 else ""
            rate = Text(f"{i.failure_rate:.0%}", style=style)
            table.add_row(s.name, i.instruction, f"{i.failed}/{i.answered}", rate)
        if s.instructions:
            table.add_section()
    return table


def print_report(report: Report, console: Console) -> None:
    """Print the summary tables, then any notes about rejected rows and unreadable labels."""
    if not report.scorers:
        console.print(f"{report.rows} rows in {report.source}; none has a scored result.")
    else:
        console.print(overview_table(report))
        if any(s.instructions for s in report.scorers):
            console.print(instruction_table(report))
    if report.rows_rejected:
        fields = ", ".join(f"{name} ({n})" for name, n in report.rejected.items())
        were = "row was" if report.rows_rejected == 1 else "rows were"
        console.print(
            Text(f"{report.rows_rejected} {were} rejected before scoring: {fields}", "yellow")
        )
    if report.unreadable_labels:
        console.print(
            Text(
                f"{report.unreadable_labels} gold labels in {report.gold_column!r} are not yes/no "
                f"values (e.g. {report.unreadable_example}); they were left out of AUROC",
                "yellow",
            )
        )
