"""`assay report`: turn a run's output into an HTML page and a terminal summary.

`collect` folds output lines into tallies, `stats` computes the numbers (histograms, bootstrap
intervals, AUROC, calibration), `model` gathers them per detector or metric, `compare` sets a
run against a baseline, `svg` draws the charts, `html` renders the page, `terminal` prints the
tables and `json_view` gives everything as JSON.
"""

from __future__ import annotations

from pathlib import Path

from assay.report.collect import DEFAULT_LABEL_COLUMNS, RunTally, collect
from assay.report.compare import Comparison, compare
from assay.report.html import render_html, write_html
from assay.report.model import Report, build_report
from assay.report.terminal import print_comparison, print_report

__all__ = [
    "DEFAULT_LABEL_COLUMNS",
    "Comparison",
    "Report",
    "RunTally",
    "build_report",
    "collect",
    "compare",
    "default_report_path",
    "print_comparison",
    "print_report",
    "render_html",
    "write_html",
]


def default_report_path(output: Path) -> Path:
    """Where `assay report OUTPUT` writes its page by default: next to OUTPUT, as
    `<name without .jsonl>.report.html` (`run.scored.jsonl` -> `run.scored.report.html`); any
    other extension stays in the name (`run.scored.parquet` -> `run.scored.parquet.report.html`),
    so the reports of a JSONL and a Parquet output of one name do not overwrite each other."""
    name = output.stem if output.suffix.lower() == ".jsonl" else output.name
    return output.with_name(name + ".report.html")
