"""The `assay` command (Typer). One module per command group: `detect` (`detect`,
`detectors`), `run`, `report`, `serve`, `metrics`, `ood`; options several commands take are in
`options`, and what they share on the terminal (exit codes, one-line errors, progress bars,
LLM usage tables, warnings) in `common`. Nothing outside this package imports it.

Exit codes: 0 ran, 1 scoring failed, 2 bad input; never a traceback.
"""

from __future__ import annotations

import typer

from assay.cli import detect, metrics, ood, report, run, serve
from assay.cli.common import EXIT_BAD_INPUT, EXIT_FAILED

__all__ = ["EXIT_BAD_INPUT", "EXIT_FAILED", "app"]

app = typer.Typer(
    name="assay",
    help="Judge the outputs of LLM applications.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

app.add_typer(metrics.metrics_app, name="metrics")
app.command("ood")(ood.ood_command)
app.command("detect")(detect.detect_command)
app.command("detectors")(detect.detectors_command)
app.command("serve")(serve.serve_command)
app.command("run")(run.run_command)
app.command("report")(report.report_command)
