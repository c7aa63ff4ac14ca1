"""The `assay` command (Typer). One module per command group: `detect` (`detect`,
`detectors`), `run`, `report`, `serve`, `metrics`, `ood`; options several commands take are in
`options`, and what they share on the terminal (exit codes, one-line errors, progress, LLM
usage tables, warnings) in `common`. Nothing outside this package imports it.

The grammar every command follows: booleans are `--flag/--no-flag`; a command that prints data
takes `--json`; a user error is one red line on stderr; exit codes are those in `common`
(0 ran, 1 a gate failed or the command could not finish, 2 unusable input, 3 rows errored).
"""

from __future__ import annotations

from typing import Annotated

import typer

from assay.cli import detect, metrics, ood, report, run, serve
from assay.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_ROWS_ERRORED,
    OneLineErrorsGroup,
    reported_errors,
)

__all__ = ["EXIT_BAD_INPUT", "EXIT_FAILED", "EXIT_ROWS_ERRORED", "app"]

app = typer.Typer(
    name="assay",
    cls=OneLineErrorsGroup,
    help="Judge the outputs of LLM applications.",
    epilog="Switches come in pairs (--explain/--no-explain); commands that print data take "
    "--json. Exit codes: 0 ran, 1 a gate failed or the command could not finish (assay "
    "detect's judge or assay run's publishing failed), 2 unusable input, "
    "3 rows errored (see --allow-errors), 130 interrupted.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Click's plain help wraps to the terminal; Rich's panels cut long help at 80 columns.
    rich_markup_mode=None,
)


def check_environment() -> None:
    """Raise RequestValidationError naming the first `$ASSAY_*` variable whose value cannot work."""
    # Imported here, not at the top: `assay --help` should not pay for them.
    from assay.environment import JUDGE_ENV, cache_megabytes, default_judge_name, thread_count
    from assay.judges import judge_names
    from assay.schema import RequestValidationError

    thread_count()
    cache_megabytes()
    judge = default_judge_name()
    if judge not in judge_names():
        known = ", ".join(judge_names())
        raise RequestValidationError(
            f"${JUDGE_ENV}", f"unknown judge {judge!r}; known judges: {known}"
        )


def _print_version(value: bool) -> None:
    if value:
        from assay import __version__

        typer.echo(f"assay {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_print_version,
            is_eager=True,
            help="Print Assay's version and exit.",
        ),
    ] = False,
) -> None:
    """Judge the outputs of LLM applications."""
    with reported_errors({}):  # a bad $ASSAY_* value stops every command at once, named
        check_environment()


# In the order a user meets them: see what is judged, judge one response, a dataset, look at
# the results, share them, then the metrics.
app.command("detectors")(detect.detectors_command)
# A short_help where the docstring's first sentence would be cut at 80 columns.
app.command("detect", short_help="Score one response and explain each instruction.")(
    detect.detect_command
)
app.command("run")(run.run_command)
app.command("report", short_help="Report on a run's output: HTML page, tables, CI gates.")(
    report.report_command
)
app.command("serve")(serve.serve_command)
app.add_typer(metrics.metrics_app, name="metrics")
app.command("ood", short_help="Probe a live system with in- and out-of-domain questions.")(
    ood.ood_command
)
