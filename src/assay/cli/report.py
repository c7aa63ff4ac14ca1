"""`assay report`: an HTML page and terminal tables for a run's output, with optional gates."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import Progress, TextColumn

from assay.cli.common import EXIT_FAILED, RateColumn, fail, reported_errors
from assay.cli.options import FailUnder, Junit
from assay.runner import gates
from assay.runner.output import iter_output_lines
from assay.schema import RequestValidationError


def _counted(lines: Iterator[dict[str, Any]], label: str) -> Iterator[dict[str, Any]]:
    """Pass `lines` through while a progress line on stderr counts them (large outputs take a
    while to read; the count is not known up front, so there is no bar to fill). Shown on a
    terminal only: in a CI log a vanishing counter would leave just a blank line."""
    console = Console(stderr=True)
    progress = Progress(
        TextColumn(label),
        TextColumn("{task.completed:,} rows"),
        RateColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal,
    )
    with progress:
        task = progress.add_task(label, total=None)
        count = 0
        for count, line in enumerate(lines, start=1):
            yield line
            if count % 1000 == 0:  # updating per line would cost more than reading it
                progress.update(task, completed=count)
        progress.update(task, completed=count)


_REPORT_OPTIONS = {
    "html": "--html",
    "label_column": "--label-column",
    "junit": "--junit",
}


def report_command(
    output: Annotated[Path, typer.Argument(help="A run's output file: .jsonl or .parquet.")],
    html: Annotated[
        Path | None,
        typer.Option("--html", help="HTML file to write (default: <output>.report.html)."),
    ] = None,
    label_column: Annotated[
        str | None,
        typer.Option(
            "--label-column", help="Column with gold labels (default: label, gold or gold_label)."
        ),
    ] = None,
    fail_under: FailUnder = None,
    junit: Junit = None,
) -> None:
    """Report on a run's output: an HTML page with charts, summary tables, optional CI gates."""
    # Imported here, not at the top: numpy and jinja2 would slow every other command's start.
    from assay import __version__
    from assay import report as reporting

    with reported_errors(_REPORT_OPTIONS):
        thresholds = gates.parse_fail_under(fail_under or [])
        tally = reporting.collect(_counted(iter_output_lines(output), "reading"), label_column)
        if label_column and tally.gold_column is None:
            raise RequestValidationError(
                "label_column", f"no row of {output} has a column {label_column!r}"
            )
        failures = gates.check_fail_under(tally.means(), thresholds)
        built = reporting.build_report(tally, str(output), thresholds, failures)
        page = html or reporting.default_report_path(output)
        reporting.write_html(built, page, __version__)
        written = [str(page)]
        if junit is not None:
            suite = "assay." + output.stem.replace(".", "_")
            lines = _counted(iter_output_lines(output), "writing JUnit")
            gates.write_junit(lines, junit, thresholds, suite_name=suite)
            written.append(str(junit))
    console = Console(highlight=False)
    reporting.print_report(built, console)
    console.print(f"wrote {' and '.join(written)}", soft_wrap=True)
    if failures:
        raise fail("; ".join(failures), EXIT_FAILED)
