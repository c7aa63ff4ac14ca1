"""The report's terminal summary: rich tables of the same numbers the HTML page shows."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from assay.report.compare import Change, Comparison
from assay.report.model import Report, ScorerReport
from assay.report.ood_tables import ood_tables
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
    # Short at 80 columns; the gate's failure message below the table gives the figure compared.
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
        for scorer in report.scorers:
            if scorer.ood is not None:
                for table in ood_tables(scorer.ood, scorer.name):
                    console.print(table)
    if report.rows_rejected:
        fields = ", ".join(f"{name} ({n})" for name, n in report.rejected.items())
        were = "row was" if report.rows_rejected == 1 else "rows were"
        console.print(Text(f"{report.rows_rejected} {were} not scored: {fields}", "yellow"))
    if report.unreadable_labels:
        console.print(
            Text(
                f"{report.unreadable_labels} gold labels in {report.gold_column!r} are not yes/no "
                f"values (e.g. {report.unreadable_example}); they were left out of AUROC",
                "yellow",
            )
        )


def _delta(change: Change | None) -> str:
    return "–" if change is None else f"{change.delta:+.3f}"


def _interval_of(change: Change | None) -> str:
    if change is None or change.interval is None:
        return "–"
    return f"{change.interval.low:+.2f} to {change.interval.high:+.2f}"


def _short(text: str | None, width: int = 70) -> str:
    flat = " ".join((text or "").split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def print_comparison(comparison: Comparison, console: Console) -> None:
    """The change per scorer and instruction, then the rows that went from pass to fail."""
    table = Table(title=f"change against {comparison.baseline_source}")
    table.add_column("scorer", style="bold", no_wrap=True)
    table.add_column("before → after", justify="right", no_wrap=True)
    table.add_column("change", justify="right")
    table.add_column("95% interval", justify="right", no_wrap=True)
    table.add_column("↓fail", justify="right")
    table.add_column("↑pass", justify="right")
    for s in comparison.scorers:
        change = s.change
        style = "bold red" if change is not None and change.significant_drop else ""
        means = f"{change.baseline:.3f} → {change.candidate:.3f}" if change else "–"
        table.add_row(
            s.name,
            means,
            Text(_delta(change), style=style),
            _interval_of(change),
            Text(str(s.regressed), style="red" if s.regressed else ""),
            str(s.improved),
        )
    console.print(table)
    pairs = (
        ", ".join(
            f"{s.name}: {s.pairs}" + (f", {s.lost} scored before and not now" if s.lost else "")
            for s in comparison.scorers
        )
        or "none"
    )
    console.print(
        f"rows paired by {comparison.paired_by} ({pairs}); {comparison.only_baseline} only in "
        f"the baseline, {comparison.only_candidate} only in {comparison.candidate_source}"
        + (f"; {comparison.pairing_problem}" if comparison.pairing_problem else ""),
        soft_wrap=True,
        highlight=False,
    )
    rates = Table(title="instructions followed, before → after")
    rates.add_column("instruction")
    rates.add_column("before → after", justify="right", no_wrap=True)
    rates.add_column("95% interval", justify="right", no_wrap=True)
    for s in comparison.scorers:
        for i in s.instructions:
            style = "bold red" if i.change.significant_drop else ""
            rates.add_row(
                f"{s.name}: {i.instruction}",
                Text(f"{i.change.baseline:.0%} → {i.change.candidate:.0%}", style=style),
                _interval_of(i.change),
            )
    if any(s.instructions for s in comparison.scorers):
        console.print(rates)
    for s in comparison.scorers:
        if not s.regressed_rows:
            continue
        console.print(Text(f"{s.name}: rows that went from pass to fail", style="bold"))
        for flip in s.regressed_rows:
            console.print(
                f"  {flip.key}: {flip.baseline_score:.2f} → {flip.candidate_score:.2f}  "
                f"query: {_short(flip.candidate_text.user_query, 50)}",
                soft_wrap=True,
            )
            console.print(
                f"    before: {_short(flip.baseline_text.generated_text)}", soft_wrap=True
            )
            console.print(
                f"    after:  {_short(flip.candidate_text.generated_text)}", soft_wrap=True
            )
        if s.regressed > len(s.regressed_rows):
            console.print(f"  … and {s.regressed - len(s.regressed_rows)} more")
