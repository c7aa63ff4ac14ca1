"""`assay run`: score a dataset with detectors or a metric, locally or on Ray.

The engines live in `assay.runner`; this module turns flags into a scorer and run options,
draws the progress bar, prints the summary and applies the CI gates.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from assay._sync import run_sync
from assay.cli.common import (
    EXIT_FAILED,
    fail,
    print_plan,
    print_usage,
    progress_bar,
    reported_errors,
)
from assay.cli.ood import print_probe_warnings
from assay.cli.options import (
    LLM_OPTION_LABELS,
    CascadeBand,
    DryRun,
    Explain,
    FailUnder,
    JudgeName,
    Junit,
    LLMOptions,
    NoCache,
    apply_llm_options,
)
from assay.runner import gates
from assay.runner.io import count_rows
from assay.runner.local import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_STREAM_BATCH_SIZE,
    RunOptions,
    prepare_run,
    run_file,
)
from assay.runner.metric_rows import MetricScorer, check_metric_name, read_config_text
from assay.runner.output import iter_output_lines
from assay.runner.ray_engine import run_file_ray_async
from assay.runner.retry import retry_failed_async
from assay.runner.rows import DetectorScorer
from assay.runner.summary import PASS_THRESHOLD, RunSummary
from assay.schema import RequestValidationError

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
    **LLM_OPTION_LABELS,
}


class Engine(StrEnum):
    """Where `assay run` scores rows."""

    local = "local"
    ray = "ray"


def run_command(
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
    explain: Explain = False,
    judge: JudgeName = None,
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
    fail_under: FailUnder = None,
    junit: Junit = None,
    no_cache: NoCache = False,
    dry_run: DryRun = False,
    llm: LLMOptions = None,
    cascade_band: CascadeBand = None,
) -> None:
    """Score every row of a dataset; write one record per row and a summary.

    An interrupted run continues where it stopped when started again with the same command.
    """
    with reported_errors(_RUN_OPTIONS):
        apply_llm_options(no_cache, llm, cascade_band)
        scorer = _run_scorer(detector, metric, config, explain, judge, column)
        if stream_batch_size is None:
            stream_batch_size = _manifest_stream_batch_size(metric)
        options = RunOptions(batch_size, stream_batch_size, workers, row_timeout)
        # Checked up front too, so an unusable run fails before a progress bar is drawn.
        output = prepare_run(file, out, scorer, options)
        thresholds = gates.parse_fail_under(fail_under or [], known=scorer.score_names)
        if dry_run:
            if not isinstance(scorer, DetectorScorer):
                raise RequestValidationError("dry_run", "estimates LLM calls of detector runs only")
            from assay.runner.plan import llm_judge_settings, plan_rows

            print_plan(llm_judge_settings(), *plan_rows(file, scorer))
            return
        total = count_rows(file)
        with progress_bar("retrying" if retry_failed else "scoring") as (progress, task):
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
        raise fail("; ".join(failures), EXIT_FAILED)


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
    for numbers in summary.detectors.values():
        if numbers.metric_tally is not None:
            print_probe_warnings(numbers.metric_tally.summary())
    print_usage(summary.usage, summary.rows_with_calls, summary.rows)
    console.print(f"wrote {summary.output_path} and {summary.summary_path}", soft_wrap=True)
