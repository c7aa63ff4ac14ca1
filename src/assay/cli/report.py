"""`assay report`: an HTML page and terminal tables (or JSON) for a run's output, optionally
compared with a baseline run, with CI gates (`--fail-under`, `--fail-on-regression`, JUnit)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.progress import Progress, TextColumn

from assay.cli.common import (
    EXIT_ROWS_ERRORED,
    RateColumn,
    fail,
    outcome_code,
    plain_console,
    reported_errors,
    warn,
)
from assay.cli.options import AllowErrors, FailUnder, JsonOutput, Junit, rate
from assay.metrics.ood import METRIC_NAME as OOD_METRIC
from assay.runner import gates
from assay.runner.checkpoint import checkpoint_path_for
from assay.runner.ood_gates import mean_gate_caveat, ood_gates, tally_figures
from assay.runner.output import (
    check_not_overwriting,
    check_writable,
    files_beside,
    iter_output_lines,
    recorded_summary,
    summary_path_for,
)
from assay.schema import RequestValidationError

if TYPE_CHECKING:
    from assay.report.collect import RunTally
    from assay.report.compare import Comparison


def _counted(lines: Iterator[dict[str, Any]], label: str) -> Iterator[dict[str, Any]]:
    """Pass `lines` through while a progress line on stderr counts them (large outputs take a
    while to read; the count is not known up front, so there is no bar to fill). Shown on a
    terminal only: in a CI log a vanishing counter would leave just a blank line."""
    console = plain_console(stderr=True)
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
    "out": "OUTPUT",  # the output reader names the file it reads by `assay run`'s --out
    "html": "--html",
    "label_column": "--label-column",
    "junit": "--junit",
    "baseline": "--baseline",
    "fail_on_regression": "--fail-on-regression",
    "max_over_rejection": "--max-over-rejection",
    "max_missed_refusal": "--max-missed-refusal",
}


def _outputs(paths: list[Path], baseline: Path | None) -> tuple[Path | None, Path]:
    """(baseline, output) from `OUTPUT`, `BASELINE OUTPUT` or `OUTPUT --baseline BASELINE`."""
    if len(paths) > 2:
        raise RequestValidationError(
            "OUTPUT", f"give one output, or two to compare; got {len(paths)}"
        )
    if len(paths) == 2:
        if baseline is not None:
            raise RequestValidationError(
                "baseline", "give the baseline as the first of two outputs or with --baseline"
            )
        return paths[0], paths[1]
    return baseline, paths[0]


def report_command(
    paths: Annotated[
        list[Path],
        typer.Argument(
            metavar="OUTPUT [CANDIDATE]",
            help="A run's output (.jsonl or .parquet); with two, the first is the baseline the "
            "second is compared with.",
            show_default=False,
        ),
    ],
    baseline: Annotated[
        Path | None,
        typer.Option(
            "--baseline", metavar="OUTPUT", help="Compare with this earlier run's output."
        ),
    ] = None,
    html: Annotated[
        Path | None,
        typer.Option(
            "--html",
            metavar="FILE",
            help="HTML file to write (default: <output without .jsonl>.report.html).",
        ),
    ] = None,
    label_column: Annotated[
        str | None,
        typer.Option(
            "--label-column",
            metavar="COLUMN",
            help="Column with gold labels (default: label, gold or gold_label).",
        ),
    ] = None,
    fail_under: FailUnder = None,
    fail_on_regression: Annotated[
        bool,
        typer.Option(
            "--fail-on-regression/--no-fail-on-regression",
            help="Exit 1 when a scorer's mean fell against the baseline beyond the noise (its "
            "paired 95% interval is wholly below zero).",
        ),
    ] = False,
    max_over_rejection: Annotated[
        float | None,
        typer.Option(
            "--max-over-rejection",
            callback=rate,
            help=f"Fail above this over-rejection rate (0-1; {OOD_METRIC} runs only).",
        ),
    ] = None,
    max_missed_refusal: Annotated[
        float | None,
        typer.Option(
            "--max-missed-refusal",
            callback=rate,
            help=f"Fail above this missed-refusal rate (0-1; {OOD_METRIC} runs only).",
        ),
    ] = None,
    junit: Junit = None,
    allow_errors: AllowErrors = False,
    as_json: JsonOutput = False,
) -> None:
    """Report on a run's output, or compare two: an HTML page, tables, CI gates.

    Exit codes: 0 ran, 1 a gate failed, 2 unusable input; when gating (--fail-under,
    --fail-on-regression, --max-over-rejection, --max-missed-refusal or --junit), 3 when rows
    errored (unless --allow-errors).
    """
    # Imported here, not at the top: numpy and jinja2 would slow every other command's start.
    from assay import __version__
    from assay import report as reporting
    from assay.report.json_view import report_json

    with reported_errors(_REPORT_OPTIONS):
        base, output = _outputs(paths, baseline)
        for run, label in ((output, "OUTPUT"), (base, "baseline")):
            # A run killed mid-way keeps its checkpoint: its output is only the rows done so
            # far, and a gate on it would pass a run that never finished.
            if run is not None and checkpoint_path_for(run).exists():
                raise RequestValidationError(
                    label,
                    f"{run} is an unfinished run (its checkpoint is beside it); rerun the same "
                    "`assay run` command to finish it, then report",
                )
        kept = {"the output reported on": output, "the baseline": base}
        kept |= files_beside(output, "the output") | files_beside(base, "the baseline")
        for path, field in ((html, "html"), (junit, "junit")):
            if path is not None:
                check_writable(path, field)
                check_not_overwriting(path, field, kept)
                kept[f"--{field}"] = path
        if fail_on_regression and base is None:
            raise RequestValidationError("fail_on_regression", "needs a baseline to compare with")
        thresholds = gates.parse_fail_under(fail_under or [], scales=None)
        tally = reporting.collect(_counted(iter_output_lines(output), "reading"), label_column)
        if not tally.rows:
            raise RequestValidationError("OUTPUT", f"{output} holds no rows to report on")
        if not tally.scorers and not tally.rows_with_errors:
            # Every line lacks both a result and an error: an input file, not a run's output
            # (it wrote an empty page and exited 0).
            raise RequestValidationError(
                "OUTPUT",
                f"no row of {output} has a scored result or an error: is it an input file? "
                "Score it with `assay run` first and report on that output",
            )
        gating = bool(
            fail_under
            or fail_on_regression
            or max_over_rejection is not None
            or max_missed_refusal is not None
            or junit is not None
        )
        _check_whole(output, tally.rows, gating)
        # A rescaled metric's results say its range, so thresholds are checked once read.
        gates.check_scales(thresholds, {name: s.scale for name, s in tally.scorers.items()})
        gates.refuse_inverted(thresholds, [name for name, s in tally.scorers.items() if s.inverted])
        if label_column and tally.gold_column is None:
            raise RequestValidationError(
                "label_column", f"no row of {output} has a column {label_column!r}"
            )
        comparison = None
        if base is not None:
            comparison = reporting.compare(
                _counted(iter_output_lines(base), "reading the baseline"),
                iter_output_lines(output),
                (str(base), str(output)),
                thresholds,
                baseline_again=iter_output_lines(base),
            )
        gate_cases = gates.fail_under_gates(tally.gate_figures(), thresholds)
        if fail_on_regression and comparison is not None:
            gate_cases += _regression_gates(comparison)
        rate_gated = max_over_rejection is not None or max_missed_refusal is not None
        if rate_gated:
            gate_cases += _rate_gates(tally, output, max_over_rejection, max_missed_refusal)
        failures = [gate.failure for gate in gate_cases if gate.failure]
        built = reporting.build_report(tally, str(output), thresholds, failures)
        for scorer in built.scorers:
            passed = scorer.threshold is not None and not scorer.gate_failed
            unchecked = passed and not rate_gated  # the rates were not gated: say if they fail
            if scorer.ood is not None and unchecked and (message := mean_gate_caveat(scorer.ood)):
                warn(message)
        regression_passed = {
            case.name.removeprefix("--fail-on-regression ")
            for case in gate_cases
            if case.name.startswith("--fail-on-regression ") and case.failure is None
        }
        # A switch to a system that declines everything raises the mean (0.75 with three
        # probes): a regression gate on the mean calls it an improvement.
        for scorer in built.scorers:
            if rate_gated or scorer.ood is None or scorer.name not in regression_passed:
                continue
            if message := mean_gate_caveat(scorer.ood, "regression"):
                warn(message)
        page = html or reporting.default_report_path(output)
        reporting.write_html(built, page, __version__, comparison)
        written = [str(page)]
        if junit is not None:
            suite = "assay." + output.stem.replace(".", "_")
            lines = _counted(iter_output_lines(output), "writing JUnit")
            gates.write_junit(
                lines, junit, thresholds, suite, gates=gate_cases, allow_errors=allow_errors
            )
            written.append(str(junit))
    if as_json:
        data = report_json(built, comparison)
        data["gates"] = [
            {"gate": g.name, "passed": g.failure is None, "message": g.failure} for g in gate_cases
        ]
        typer.echo(json.dumps(data, indent=2, ensure_ascii=False))
    else:
        console = plain_console()
        reporting.print_report(built, console)
        if comparison is not None:
            reporting.print_comparison(comparison, console)
        console.print(f"wrote {' and '.join(written)}", soft_wrap=True)
    code = outcome_code(failures, tally.rows_with_errors if gating else 0, allow_errors)
    if code == EXIT_ROWS_ERRORED:
        raise fail(
            f"{tally.rows_with_errors} of {tally.rows} rows errored in {output}; pass "
            "--allow-errors to exit 0",
            code,
        )
    if code:
        raise fail("; ".join(failures), code)


def _check_whole(output: Path, rows: int, gating: bool) -> None:
    """Refuse to gate (else warn about) an output with fewer or more rows than its run's summary
    counts: cut short or pasted together after the run, its gates would judge part of a run
    (they passed on its first 5 rows of 20)."""
    # No summary beside it (a copy, another tool's file): nothing to compare.
    recorded = recorded_summary(output).get("rows")
    if type(recorded) is not int or recorded == rows:
        return
    problem = (
        f"{output} holds {rows:,} rows, but its run's summary ({summary_path_for(output)}) "
        f"counts {recorded:,}: this is not that run's whole output"
    )
    if gating:
        raise RequestValidationError(
            "OUTPUT",
            f"{problem}; rerun the `assay run` command, or remove the summary if the file was "
            "cut on purpose",
        )
    warn(problem)


def _rate_gates(
    tally: RunTally, output: Path, over_rejection: float | None, missed_refusal: float | None
) -> list[gates.GateCase]:
    """`assay ood`'s two rate gates on a run's recorded OOD results (`runner.ood_gates`)."""
    scorer = tally.scorers.get(OOD_METRIC)
    if scorer is None or scorer.ood is None:
        field = "max_over_rejection" if over_rejection is not None else "max_missed_refusal"
        raise RequestValidationError(
            field, f"{output} holds no {OOD_METRIC} results, the only ones with these rates"
        )
    found = ood_gates(
        scorer.ood.summary(), tally_figures(scorer.ood), None, over_rejection, missed_refusal
    )
    return [gates.GateCase(g.name, None if g.passed else g.message) for g in found]


def _regression_gates(comparison: Comparison) -> list[gates.GateCase]:
    """One gate per scorer compared: failed when its mean fell beyond the noise."""
    if not comparison.scorers:
        return [
            gates.GateCase(
                "--fail-on-regression",
                f"no rows pair up between {comparison.baseline_source} and "
                f"{comparison.candidate_source} (paired by {comparison.paired_by}; "
                f"{comparison.only_baseline} only in the baseline, {comparison.only_candidate} "
                "only in the output): nothing to compare"
                + (f"; {comparison.pairing_problem}" if comparison.pairing_problem else ""),
            )
        ]
    failed = {message.split(":", 1)[0]: message for message in comparison.regressions()}
    cases = [
        gates.GateCase(f"--fail-on-regression {s.name}", failed.get(s.name))
        for s in comparison.scorers
    ]
    if comparison.pairing_problem:
        cases.append(gates.GateCase("--fail-on-regression pairing", comparison.pairing_problem))
    return cases
