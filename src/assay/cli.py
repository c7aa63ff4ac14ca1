"""The `assay` command: score one response, list detectors, score a dataset file.

Every error ends in one red line on stderr naming the field and what was wrong, never a
traceback. Exit codes: 0 ran, 1 scoring failed (e.g. the judge could not load), 2 bad input.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

from assay import cli_llm
from assay._sync import run_sync
from assay.detectors import DETECTORS
from assay.detectors.evaluate import detect_items, parse_item
from assay.metrics.commands import metrics_app, ood_command
from assay.runner import gates
from assay.runner.io import count_rows
from assay.runner.local import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_STREAM_BATCH_SIZE,
    RunOptions,
    default_output_path,
    run_file,
)
from assay.runner.metric_rows import MetricScorer, check_metric_name, read_config_text
from assay.runner.output import check_output_path, iter_output_lines
from assay.runner.ray_engine import run_file_ray_async
from assay.runner.retry import retry_failed_async
from assay.runner.rows import (
    DetectorScorer,
    build_request,
    check_detector_names,
    check_judge_name,
)
from assay.runner.summary import PASS_THRESHOLD, RunSummary
from assay.schema import DetectorFailed, RequestValidationError

EXIT_FAILED = 1
EXIT_BAD_INPUT = 2

app = typer.Typer(
    name="assay",
    help="Judge the outputs of LLM applications.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# Metric manifests and the live OOD probe; their bulk lives in assay.metrics.commands.
app.add_typer(metrics_app, name="metrics")
app.command("ood")(ood_command)

#: How request fields are spelled on the command line, for error messages.
_DETECT_OPTIONS = {
    "user_query": "--query",
    "generated_text": "--response",
    "context": "--context",
    "detector": "--detector",
    "judge": "--judge",
    **cli_llm.OPTION_LABELS,
}
_RUN_OPTIONS = {
    "detector": "--detector",
    "judge": "--judge",
    "out": "--out",
    "map": "--map",
    "batch_size": "--batch-size",
    "stream_batch_size": "--stream-batch-size",
    "workers": "--workers",
    "row_timeout": "--row-timeout",
    "engine": "--engine",
    "metric": "--metric",
    "config": "--config",
    "dry_run": "--dry-run",
    **cli_llm.OPTION_LABELS,
}


def _label(field: str, options: Mapping[str, str]) -> str:
    """`generated_text` -> `--response (generated_text)`; unknown names stay as they are."""
    labels = []
    for part in field.split(", "):
        base = re.split(r"[.\[]", part, maxsplit=1)[0]
        option = options.get(base)
        if option is None or option == "--" + part.replace("_", "-"):
            labels.append(option or part)
        else:
            labels.append(f"{option} ({part})")
    return ", ".join(labels)


def _fail(message: str, code: int) -> typer.Exit:
    one_line = " ".join(message.split())
    Console(stderr=True, soft_wrap=True).print(Text(f"error: {one_line}", style="bold red"))
    return typer.Exit(code)


@contextmanager
def _reported_errors(options: Mapping[str, str]) -> Iterator[None]:
    """Turn any error into one red line and an exit code."""
    try:
        yield
    except typer.Exit:
        raise
    except RequestValidationError as error:
        raise _fail(f"{_label(error.field, options)}: {error.message}", EXIT_BAD_INPUT) from None
    except DetectorFailed as error:
        raise _fail(str(error), EXIT_FAILED) from None
    except Exception as error:  # anything else still gets one line, not a traceback
        raise _fail(f"{type(error).__name__}: {error}", EXIT_FAILED) from None


@app.command()
def detect(
    response: Annotated[str, typer.Option("--response", "-r", help="The response to judge.")],
    query: Annotated[
        str | None, typer.Option("--query", "-q", help="The user query it answers.")
    ] = None,
    context: Annotated[
        list[str] | None,
        typer.Option("--context", "-c", help="A context document (repeat for several)."),
    ] = None,
    detector: Annotated[
        list[str] | None,
        typer.Option(
            "--detector",
            "-d",
            help="Detector to run (repeatable); default: every one whose inputs are given.",
        ),
    ] = None,
    explain: Annotated[bool, typer.Option("--explain", help="Include explanations.")] = False,
    judge: Annotated[
        str | None,
        typer.Option("--judge", help="Judge backend: embedded (default), openai or cascade."),
    ] = None,
    no_cache: cli_llm.NoCache = False,
    dry_run: cli_llm.DryRun = False,
    llm: cli_llm.LLMOptions = None,
    cascade_band: cli_llm.CascadeBand = None,
) -> None:
    """Score one response and print the result JSON."""
    with _reported_errors(_DETECT_OPTIONS):
        cli_llm.apply_llm_options(no_cache, llm, cascade_band)
        if detector:
            check_detector_names(detector)
        if judge is not None:
            check_judge_name(judge)
        fields: dict[str, Any] = {"generated_text": response}
        if query is not None:
            fields["user_query"] = query
        if context:
            fields["context"] = list(context)
        item = parse_item(build_request(fields, detector, explain, must_compute="all_or_none"))
        if dry_run:
            cli_llm.print_plan(*cli_llm.plan_items([item], judge))
            return
        results = run_sync(detect_items([item], judge))
    typer.echo(json.dumps(results, indent=2, ensure_ascii=False))


@app.command("detectors")
def list_detectors(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a tree.")] = False,
) -> None:
    """List the detectors, their inputs and their instructions."""
    if as_json:
        listing = [
            {
                "name": d.name,
                "description": d.description,
                "required_inputs": list(d.required_inputs),
                "optional_inputs": list(d.optional_inputs),
                "instructions": [{"check": i.check, "text": i.text} for i in d.instructions],
            }
            for d in DETECTORS.values()
        ]
        typer.echo(json.dumps(listing, indent=2, ensure_ascii=False))
        return
    # Printed line by line without wrapping, so instruction texts stay whole (and greppable).
    console = Console(soft_wrap=True, highlight=False)
    for d in DETECTORS.values():
        console.print(Text.assemble((d.name, "bold cyan"), " — ", d.description))
        console.print(Text.assemble("├── ", ("required: ", "dim"), ", ".join(d.required_inputs)))
        optional = ", ".join(d.optional_inputs) or "none"
        console.print(Text.assemble("├── ", ("optional: ", "dim"), optional))
        console.print(Text.assemble("└── ", ("instructions", "dim")))
        for number, i in enumerate(d.instructions, start=1):
            branch = "└── " if number == len(d.instructions) else "├── "
            console.print(Text.assemble("    ", branch, (f"{i.check}: ", "green"), i.text))
        console.print()


class _RateColumn(ProgressColumn):
    """Rows per second so far."""

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text(f"{speed:.1f} rows/s" if speed else "– rows/s", style="progress.data.speed")


class Engine(StrEnum):
    """Where `assay run` scores rows."""

    local = "local"
    ray = "ray"


@app.command()
def run(
    file: Annotated[Path, typer.Argument(help="Dataset to score: .jsonl, .csv or .parquet.")],
    detector: Annotated[
        list[str] | None,
        typer.Option(
            "--detector",
            "-d",
            help="Detector to run (repeatable); default: per row, every one it has inputs for.",
        ),
    ] = None,
    metric: Annotated[
        str | None,
        typer.Option("--metric", "-m", help="Score with a metric instead, e.g. llm.ood_detection."),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option("--config", help="The metric's run config (YAML/JSON; with a sut: block)."),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", "-o", help="Output .jsonl or .parquet (default: <input stem>.scored.jsonl)."
        ),
    ] = None,
    explain: Annotated[bool, typer.Option("--explain", help="Include explanations.")] = False,
    judge: Annotated[
        str | None,
        typer.Option("--judge", help="Judge backend: embedded (default), openai or cascade."),
    ] = None,
    column: Annotated[
        list[str] | None,
        typer.Option(
            "--map",
            help="Use a differently named column: FIELD=COLUMN, e.g. generated_text=answer "
            "(repeatable).",
        ),
    ] = None,
    batch_size: Annotated[
        int, typer.Option("--batch-size", min=1, help="Rows per judge call.")
    ] = DEFAULT_BATCH_SIZE,
    stream_batch_size: Annotated[
        int | None,
        typer.Option(
            "--stream-batch-size",
            min=1,
            help="Rows read, written and checkpointed together (default: the metric's manifest, "
            f"else {DEFAULT_STREAM_BATCH_SIZE}).",
        ),
    ] = None,
    workers: Annotated[
        int, typer.Option("--workers", min=1, help="Judge calls in flight at once.")
    ] = 1,
    row_timeout: Annotated[
        float | None,
        typer.Option("--row-timeout", help="Seconds a row may take before it is a timeout error."),
    ] = None,
    restart: Annotated[
        bool, typer.Option("--restart", help="Ignore an unfinished run's checkpoint; start over.")
    ] = False,
    retry_failed: Annotated[
        bool,
        typer.Option("--retry-failed", help="Rescore only the failed rows of a finished run."),
    ] = False,
    engine: Annotated[
        Engine, typer.Option("--engine", help="local: this process; ray: judge actors on Ray.")
    ] = Engine.local,
    address: Annotated[
        str | None,
        typer.Option("--address", help="Ray cluster address (default: start a local Ray)."),
    ] = None,
    fail_under: Annotated[
        list[str] | None,
        typer.Option(
            "--fail-under",
            help="NAME=THRESHOLD: exit 1 when NAME's mean score is below it (repeatable).",
        ),
    ] = None,
    junit: Annotated[
        Path | None, typer.Option("--junit", help="Also write JUnit XML, one test case per row.")
    ] = None,
    no_cache: cli_llm.NoCache = False,
    dry_run: cli_llm.DryRun = False,
    llm: cli_llm.LLMOptions = None,
    cascade_band: cli_llm.CascadeBand = None,
) -> None:
    """Score every row of a dataset; write one record per row and a summary.

    An interrupted run continues where it stopped when started again with the same command.
    """
    with _reported_errors(_RUN_OPTIONS):
        cli_llm.apply_llm_options(no_cache, llm, cascade_band)
        scorer = _run_scorer(detector, metric, config, explain, judge, column)
        if stream_batch_size is None:
            stream_batch_size = _manifest_stream_batch_size(metric)
        options = RunOptions(batch_size, stream_batch_size, workers, row_timeout)
        # Checked up front too, so an unusable run fails before a progress bar is drawn.
        scorer.check()
        options.check()
        scorer.check_input(file)
        thresholds = gates.parse_fail_under(fail_under or [], known=scorer.score_names)
        output = out or default_output_path(file)
        check_output_path(output)
        if dry_run:
            if metric is not None:
                raise RequestValidationError("dry_run", "estimates LLM calls of detector runs only")
            column_map = parse_column_map(column or [])
            cli_llm.print_plan(*cli_llm.plan_rows(file, detector, explain, judge, column_map))
            return
        total = count_rows(file)
        with _progress_bar("retrying" if retry_failed else "scoring") as (progress, task):
            if retry_failed:
                summary, retried = run_sync(
                    retry_failed_async(
                        file,
                        output,
                        scorer,
                        options,
                        lambda done: progress.update(task, completed=done),
                    )
                )
                progress.update(task, total=retried)
            elif engine is Engine.ray:
                progress.update(task, total=total)
                summary = run_sync(
                    run_file_ray_async(
                        file,
                        output,
                        scorer,
                        options,
                        address=address,
                        restart=restart,
                        on_progress=lambda done: progress.update(task, completed=done),
                    )
                )
            else:
                progress.update(task, total=total)
                summary = run_file(
                    file,
                    output,
                    scorer=scorer,
                    options=options,
                    restart=restart,
                    on_progress=lambda done: progress.update(task, completed=done),
                )
        if junit is not None:
            suite = "assay." + output.stem.replace(".", "_")
            gates.write_junit(iter_output_lines(output), junit, thresholds, suite_name=suite)
    _print_summary(summary)
    if junit is not None:
        Console(highlight=False).print(f"wrote {junit}", soft_wrap=True)
    failures = gates.check_fail_under(summary.unrounded_means(), thresholds)
    if failures:
        raise _fail("; ".join(failures), EXIT_FAILED)


def _run_scorer(
    detector: list[str] | None,
    metric: str | None,
    config: Path | None,
    explain: bool,
    judge: str | None,
    column: list[str] | None,
) -> DetectorScorer | MetricScorer:
    column_map = parse_column_map(column or [])
    if metric is None:
        if config is not None:
            raise RequestValidationError("config", "only applies with --metric")
        return DetectorScorer(tuple(detector) if detector else None, explain, judge, column_map)
    if detector:
        raise RequestValidationError("detector", "give --detector or --metric, not both")
    if judge is not None:
        raise RequestValidationError("judge", "metrics choose their judge from the environment")
    check_metric_name(metric)
    return MetricScorer(metric, read_config_text(config), explain, column_map)


def _manifest_stream_batch_size(metric: str | None) -> int:
    if metric is None:
        return DEFAULT_STREAM_BATCH_SIZE
    from assay.metrics.manifest import get_manifest

    return get_manifest(metric).execution.stream_batch_size


def parse_column_map(specs: list[str]) -> tuple[tuple[str, str], ...]:
    """`["generated_text=answer"]` -> `(("generated_text", "answer"),)`; field "map" on error."""
    pairs = []
    for spec in specs:
        wanted, sep, present = spec.partition("=")
        if not sep or not wanted.strip() or not present.strip():
            raise RequestValidationError("map", f"expected FIELD=COLUMN, got {spec!r}")
        pairs.append((wanted.strip(), present.strip()))
    return tuple(pairs)


@contextmanager
def _progress_bar(label: str) -> Iterator[tuple[Progress, TaskID]]:
    progress = Progress(
        TextColumn(label),
        BarColumn(),
        MofNCompleteColumn(),
        _RateColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
    )
    with progress:
        yield progress, progress.add_task(label, total=None)


def _percent(value: float | None) -> str:
    return "–" if value is None else f"{value:.0%}"


def _print_summary(summary: RunSummary) -> None:
    console = Console(highlight=False)
    table = Table(title=f"{summary.rows} rows from {summary.input_path}")
    table.add_column("detector", style="bold")
    table.add_column("scored", justify="right")
    table.add_column("mean score", justify="right")
    table.add_column(f"score ≥ {PASS_THRESHOLD}", justify="right")
    table.add_column("errored", justify="right")
    rates = Table(title="instruction pass rates")
    rates.add_column("detector", style="bold")
    rates.add_column("instruction")
    rates.add_column("followed", justify="right")
    for name, numbers in summary.detectors.items():
        table.add_row(
            name,
            str(numbers.rows_scored),
            "–" if numbers.mean_score is None else f"{numbers.mean_score:.3f}",
            _percent(numbers.share_passing),
            Text(str(numbers.rows_errored), style="red" if numbers.rows_errored else ""),
        )
        for check, rate in numbers.instruction_pass_rates().items():
            rates.add_row(name, check, _percent(rate))
        rates.add_section()
    console.print(table)
    if summary.detectors:
        console.print(rates)
    if summary.rows_failed:
        console.print(
            Text(
                f"{summary.rows_failed} of {summary.rows} rows failed validation; "
                f"see their 'error' field in {summary.output_path}",
                style="yellow",
            ),
            soft_wrap=True,
        )
    cli_llm.print_usage(summary.usage, summary.rows_with_calls, summary.rows)
    console.print(f"wrote {summary.output_path} and {summary.summary_path}", soft_wrap=True)


def _counted(lines: Iterator[dict[str, Any]], label: str) -> Iterator[dict[str, Any]]:
    """Pass `lines` through while a progress line on stderr counts them (large outputs take a
    while to read; the count is not known up front, so there is no bar to fill). Shown on a
    terminal only: in a CI log a vanishing counter would leave just a blank line."""
    console = Console(stderr=True)
    progress = Progress(
        TextColumn(label),
        TextColumn("{task.completed:,} rows"),
        _RateColumn(),
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


@app.command()
def report(
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
    fail_under: Annotated[
        list[str] | None,
        typer.Option(
            "--fail-under",
            help="NAME=THRESHOLD: exit 1 when NAME's mean score is below it (repeatable).",
        ),
    ] = None,
    junit: Annotated[
        Path | None, typer.Option("--junit", help="Also write JUnit XML, one test case per row.")
    ] = None,
) -> None:
    """Report on a run's output: an HTML page with charts, summary tables, optional CI gates."""
    # Imported here, not at the top: numpy and jinja2 would slow every other command's start.
    from assay import __version__
    from assay import report as reporting

    with _reported_errors(_REPORT_OPTIONS):
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
        raise _fail("; ".join(failures), EXIT_FAILED)


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="TCP port.")] = 8000,
    database_url: Annotated[
        str | None,
        typer.Option(
            "--database-url",
            envvar="ASSAY_DATABASE_URL",
            help="SQLAlchemy URL (default: sqlite:///assay.db).",
        ),
    ] = None,
    api_keys_file: Annotated[
        Path | None,
        typer.Option(help="File with one API key per line (also $ASSAY_API_KEYS_FILE)."),
    ] = None,
    no_auth: Annotated[
        bool, typer.Option("--no-auth", help="Accept requests without a key (local use only).")
    ] = False,
    max_in_flight: Annotated[
        int, typer.Option(min=1, help="Detect requests handled at once; more get 429.")
    ] = 64,
    max_batch_items: Annotated[
        int, typer.Option(min=1, help="Most items in one detect request; more get 413.")
    ] = 100,
    job_lease_seconds: Annotated[
        float, typer.Option(min=0.1, help="Seconds before a dead worker's job is taken over.")
    ] = 60.0,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "info",
) -> None:
    """Run the HTTP API, the async job worker and the dashboard."""
    from assay.server.serve import build_settings, run_server  # the server stack loads only here

    with _reported_errors({}):
        settings = build_settings(
            database_url=database_url,
            api_keys_file=api_keys_file,
            no_auth=no_auth,
            max_in_flight=max_in_flight,
            max_batch_items=max_batch_items,
            job_lease_seconds=job_lease_seconds,
        )
        run_server(settings, host, port, log_level.lower())


if __name__ == "__main__":
    app()
