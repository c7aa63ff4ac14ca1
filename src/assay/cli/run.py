"""`assay run`: score a dataset with detectors or a metric, locally or on Ray.

The engines live in `assay.runner`; this module turns flags into a scorer and run options,
draws the progress bar, prints the summary and applies the CI gates.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import asdict
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from assay._sync import run_sync
from assay.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_INTERRUPTED,
    EXIT_ROWS_ERRORED,
    fail,
    ignore_further_interrupts,
    note,
    outcome_code,
    plain_console,
    print_plan,
    progress_bar,
    reported_errors,
    terminate_as_interrupt,
    warn,
)
from assay.cli.options import (
    LLM_OPTION_LABELS,
    AllowErrors,
    CascadeBand,
    DryRun,
    FailUnder,
    JsonOutput,
    JudgeName,
    Junit,
    LLMOptions,
    UseCache,
    apply_llm_options,
    check_llm_judge,
    check_llm_options_apply,
)
from assay.cli.publishing import PUBLISH_OPTIONS, ClientPublisher, build_publisher
from assay.cli.scorers import run_scorer
from assay.cli.summaries import print_published, print_run_summary
from assay.environment import default_judge_name
from assay.runner import gates
from assay.runner.checkpoint import checkpoint_path_for, read_checkpoint
from assay.runner.columns import dropped_columns, sample_columns
from assay.runner.io import count_rows
from assay.runner.local import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_STREAM_BATCH_SIZE,
    RunControl,
    RunOptions,
    default_output_path,
    prepare_run,
    run_file_async,
)
from assay.runner.metric_rows import MetricScorer
from assay.runner.ood_gates import mean_gate_caveat
from assay.runner.output import (
    RECORD_COLUMN,
    check_not_overwriting,
    check_writable,
    files_beside,
    iter_output_lines,
)
from assay.runner.publish import PUBLISH_BATCH_SIZE
from assay.runner.ray_engine import run_file_ray_async
from assay.runner.retry import line_failed, retry_failed_async
from assay.runner.rows import DetectorScorer
from assay.runner.summary import RunSummary
from assay.schema import RequestValidationError


def default_stream_batch_size(metric: str | None, judge: str | None, batch_size: int) -> int:
    """`--batch-size` for a metric (its rows call a live system) or an LLM judge (its rows are
    paid calls), taking seconds each: every call's rows are then written as it ends, so an
    interrupt keeps them (rows are scored independently, so the batching changes no result).
    Else `DEFAULT_STREAM_BATCH_SIZE`."""
    slow = metric is not None or (judge or default_judge_name()) in ("openai", "cascade")
    return batch_size if slow else DEFAULT_STREAM_BATCH_SIZE


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
    "retry_failed": "--retry-failed",
    "overwrite": "--overwrite",
    "address": "--address",
    "junit": "--junit",
    **PUBLISH_OPTIONS,
    **LLM_OPTION_LABELS,
}


class Engine(StrEnum):
    """Where `assay run` scores rows."""

    local = "local"
    ray = "ray"


def run_command(
    file: Annotated[
        Path,
        typer.Argument(metavar="FILE", help="Dataset to score: .jsonl, .csv or .parquet."),
    ],
    detector: Annotated[
        list[str] | None,
        typer.Option(
            "--detector",
            "-d",
            metavar="NAME",
            help="Detector to run (repeatable); default: per row, every one it has inputs for.",
        ),
    ] = None,
    metric: Annotated[
        str | None,
        typer.Option(
            "--metric",
            "-m",
            metavar="NAME",
            help="Score with a metric instead, e.g. llm.ood_detection.",
        ),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            metavar="FILE",
            help="The metric's run config (YAML/JSON; with a sut: block).",
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            "-o",
            metavar="FILE",
            help="Output .jsonl or .parquet (default: <input stem>.scored.jsonl).",
        ),
    ] = None,
    explain: Annotated[
        bool | None,
        typer.Option(
            "--explain/--no-explain",
            help="Explanations for every verdict (sets `explain` in each detector's config). "
            "Default: on for detectors, off for metrics.",
            show_default=False,
        ),
    ] = None,
    judge: JudgeName = None,
    column: Annotated[
        list[str] | None,
        typer.Option(
            "--map",
            metavar="FIELD=COLUMN",
            help="Read a field from a differently named column, e.g. generated_text=answer "
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
            help="Rows read, written and checkpointed together (default: --batch-size for a "
            f"metric or an LLM judge, else {DEFAULT_STREAM_BATCH_SIZE}).",
        ),
    ] = None,
    workers: Annotated[
        int, typer.Option("--workers", min=1, help="Judge calls in flight at once.")
    ] = 1,
    row_timeout: Annotated[
        float | None,
        typer.Option(
            "--row-timeout",
            metavar="SECONDS",
            help="Seconds a row may take before it is a timeout error.",
        ),
    ] = None,
    overwrite: Annotated[
        bool,
        typer.Option(
            "--overwrite/--no-overwrite",
            help="Start over: replace a finished output, or drop an unfinished run's checkpoint.",
        ),
    ] = False,
    restart: Annotated[bool, typer.Option("--restart", hidden=True)] = False,
    retry_failed: Annotated[
        bool,
        typer.Option(
            "--retry-failed/--no-retry-failed",
            help="Rescore only the failed rows of a finished run.",
        ),
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
    allow_errors: AllowErrors = False,
    publish: Annotated[
        bool,
        typer.Option(
            "--publish/--no-publish",
            help="Send the scored rows to an Assay server's dashboard (resumable).",
        ),
    ] = False,
    base_url: Annotated[
        str | None,
        typer.Option(
            "--base-url", metavar="URL", help="Server to publish to (default: $ASSAY_BASE_URL)."
        ),
    ] = None,
    api_key: Annotated[
        str | None,
        typer.Option(
            "--api-key",
            metavar="KEY",
            envvar="ASSAY_API_KEY",
            help="API key for the server (default: $ASSAY_API_KEY).",
            show_envvar=False,
        ),
    ] = None,
    application_name: Annotated[
        str | None,
        typer.Option("--application-name", metavar="NAME", help="Application to publish under."),
    ] = None,
    model_name: Annotated[
        str | None,
        typer.Option("--model-name", metavar="NAME", help="Model to publish under."),
    ] = None,
    publish_batch_size: Annotated[
        int,
        typer.Option(
            "--publish-batch-size",
            min=1,
            help="Rows per publish request (at most the server's --max-batch-items).",
        ),
    ] = PUBLISH_BATCH_SIZE,
    as_json: JsonOutput = False,
    cache: UseCache = None,
    dry_run: DryRun = False,
    llm: LLMOptions = None,
    cascade_band: CascadeBand = None,
) -> None:
    """Score a dataset: one output record per row, and a summary.

    An interrupted run continues where it stopped when the same command is run again. Exit
    codes: 0 ran, 1 a --fail-under gate failed or the run could not finish (publishing failed,
    say), 2 unusable input (no row could be scored), 3 rows errored (unless --allow-errors),
    130 interrupted (Ctrl-C, SIGTERM; the rows scored so far are kept).
    """
    with reported_errors(_RUN_OPTIONS):
        if junit is not None:  # first: a stale file would pass a CI step for a failed command
            target = out or default_output_path(file)
            check_writable(junit, "junit")
            kept = {"the input file": file, "--out": target, **files_beside(target, "--out")}
            check_not_overwriting(junit, "junit", kept)
            junit.unlink(missing_ok=True)
        apply_llm_options(cache, llm, cascade_band)
        scorer = run_scorer(detector, metric, config, explain, judge, column)
        if isinstance(scorer, DetectorScorer):
            check_llm_options_apply(judge, cache, llm, cascade_band)
            check_llm_judge(judge)
        if stream_batch_size is None:
            stream_batch_size = default_stream_batch_size(metric, judge, batch_size)
        options = RunOptions(batch_size, stream_batch_size, workers, row_timeout)
        publisher = None
        if publish and retry_failed:
            raise RequestValidationError(
                "publish",
                "does not apply with --retry-failed; once the retry is done, run the same "
                "command with --publish instead of --retry-failed to send the output as it is",
            )
        if overwrite and retry_failed:
            raise RequestValidationError(
                "overwrite", "replaces the whole run; --retry-failed rescores its failed rows only"
            )
        if address is not None and engine is not Engine.ray:
            raise RequestValidationError("address", "applies with --engine ray only")
        if publish:
            detector_run = isinstance(scorer, DetectorScorer)
            publisher = build_publisher(
                base_url, api_key, application_name, model_name, detector_run
            )
        # Checked up front too, so an unusable run fails before a progress bar is drawn.
        output = prepare_run(file, out, scorer, options)
        if isinstance(scorer, DetectorScorer):
            columns = sample_columns(file)
            lost = dropped_columns(columns, scorer.column_map)
            if lost:
                names = ", ".join(map(repr, lost))
                warn(
                    f"{file.name}'s column{'s' if len(lost) > 1 else ''} {names} "
                    f"{'are' if len(lost) > 1 else 'is'} not carried to the output, which writes "
                    "its own keys of those names; rename to keep"
                )
            if output.suffix.lower() == ".parquet":
                own = {RECORD_COLUMN, *(f"{name}.score" for name in scorer.score_names)}
                if shadowed := [c for c in columns if c in own]:
                    warn(
                        f"{file.name}'s {', '.join(map(repr, shadowed))} get no Parquet column "
                        "of their own, as the output has columns of those names; they are "
                        f"kept in {RECORD_COLUMN!r} only; rename to keep them as columns"
                    )
        scales = scorer.score_scales if isinstance(scorer, MetricScorer) else gates.NO_RESCALING
        thresholds = gates.parse_fail_under(
            fail_under or [], known=scorer.score_names, scales=scales
        )
        if isinstance(scorer, MetricScorer) and scorer.inverted:
            gates.refuse_inverted(thresholds, scorer.score_names)
        if dry_run:
            if not isinstance(scorer, DetectorScorer):
                raise RequestValidationError("dry_run", "estimates LLM calls of detector runs only")
            from assay.runner.plan import llm_judge_settings, plan_rows

            print_plan(llm_judge_settings(), *plan_rows(file, scorer), as_json=as_json)
            return
        total = count_rows(file)
        if retry_failed and output.exists():  # the progress counts the failed rows only
            total = sum(line_failed(line, scorer.score_names) for line in iter_output_lines(output))
        control = RunControl(
            overwrite=overwrite or restart,
            keep_finished=True,
            on_resume=lambda done: note(_resume_message(done, total, output)),
            publisher=publisher,
            publish_batch_size=publish_batch_size,
        )
        summary = _score(
            file, output, scorer, options, control, (retry_failed, engine, address, total)
        )
        if summary.already_complete and retry_failed:
            note(f"{output} has no failed rows to retry ({summary.rows:,} rows); nothing to score.")
        elif summary.already_complete:
            note(
                f"{output} already holds this run ({summary.rows:,} rows); nothing to score. "
                "Pass --overwrite to score it again."
            )
        unusable = summary.rows_unscored
        gate_cases = gates.fail_under_gates(summary.gate_figures(), thresholds)
        failures = [gate.failure for gate in gate_cases if gate.failure]
        _warn_of_mean_gates(summary, thresholds)
        if junit is not None:
            suite = "assay." + output.stem.replace(".", "_")
            gates.write_junit(
                iter_output_lines(output),
                junit,
                thresholds,
                suite_name=suite,
                gates=gate_cases,
                allow_errors=allow_errors and not unusable,
            )
    published = control.published
    if as_json:
        report = {**summary.to_dict(), "gates": _gates_json(gate_cases)}
        if published is not None:
            report["published"] = asdict(published)
        typer.echo(json.dumps(report, indent=2, ensure_ascii=False))
    else:
        print_run_summary(summary)
        if published is not None and publisher is not None:
            print_published(published, publisher.target)
        if junit is not None:
            plain_console().print(f"wrote {junit}", soft_wrap=True)
    if unusable:
        raise fail(
            f"no row of {file} could be scored: all {summary.rows} were rejected "
            f"({_by_field(summary)}); see their 'error' fields in {output}",
            EXIT_BAD_INPUT,
        )
    code = outcome_code(failures, summary.rows_with_errors, allow_errors)
    if code == EXIT_ROWS_ERRORED:
        raise fail(
            f"{summary.rows_with_errors} of {summary.rows} rows errored (see their errors in "
            f"{output}, or rescore them with --retry-failed); pass --allow-errors to exit 0",
            code,
        )
    if code:
        if summary.rows_with_errors and not allow_errors:  # the gate's exit code wins; say both
            warn(f"{summary.rows_with_errors} of {summary.rows} rows errored (see {output})")
        raise fail("; ".join(failures), code)


def _score(
    file: Path,
    output: Path,
    scorer: DetectorScorer | MetricScorer,
    options: RunOptions,
    control: RunControl,
    how: tuple[bool, Engine, str | None, int],
) -> RunSummary:
    """Run the scoring with a progress display; closes the publisher's connections after.

    how: --retry-failed, --engine, --address and the number of input rows.
    """
    retry_failed, engine, address, total = how

    async def scored() -> RunSummary:
        try:
            if retry_failed:
                summary, _ = await retry_failed_async(
                    file, output, scorer, options, control.on_progress
                )
                return summary
            if engine is Engine.ray:
                return await run_file_ray_async(
                    file, output, scorer, options, address=address, control=control
                )
            return await run_file_async(
                file, output, scorer=scorer, options=options, control=control
            )
        finally:
            if isinstance(control.publisher, ClientPublisher):
                await control.publisher.close()

    done = 0
    with progress_bar("retrying" if retry_failed else "scoring") as (progress, task):
        progress.update(task, total=total)

        def on_progress(rows: int) -> None:
            nonlocal done
            done = rows
            progress.update(task, completed=rows)

        control.on_progress = on_progress
        with terminate_as_interrupt(), contextlib.suppress(KeyboardInterrupt):
            return run_sync(scored())
        ignore_further_interrupts()
    # Interrupted; said once the progress bar has stopped, so the line is not drawn over.
    raise fail(_interrupted(output, done, total, retry_failed), EXIT_INTERRUPTED)


def _interrupted(output: Path, done: int, total: int, retry_failed: bool) -> str:
    """What an interrupted run left, from its checkpoint: rows scored may be more than rows
    written (a batch in flight), and a Parquet run writes its parts beside the output."""
    if retry_failed:
        return (
            f"interrupted after {done:,} of {total:,} failed rows were scored again; {output} "
            "is as it was before the retry: run the same command again to retry them"
        )
    checkpoint = read_checkpoint(checkpoint_path_for(output))
    written = checkpoint.rows_done if checkpoint is not None else 0
    parts = output.with_name(f"{output.name}.parts")
    where = parts if parts.is_dir() else output
    return (
        f"interrupted after {done:,} of {total:,} rows were scored; {written:,} of them are "
        f"kept in {where}: run the same command again to resume from row {written + 1:,}"
    )


def _warn_of_mean_gates(summary: RunSummary, thresholds: dict[str, float]) -> None:
    """Warn when a metric's passed mean gate hides what its own gates would catch."""
    figures = summary.gate_figures()
    for name, numbers in summary.detectors.items():
        if numbers.metric_tally is None or name not in thresholds:
            continue
        if not gates.gate_passed(figures.get(name), thresholds[name]):
            continue
        message = mean_gate_caveat(numbers.metric_tally.summary())
        if message:
            warn(message)


def _resume_message(done: int, total: int, output: Path) -> str:
    if done == 0:
        return f"resuming {output}: no row was written before it stopped; starting from row 1"
    if done >= total:
        return f"resuming {output}: all {total:,} rows are scored; finishing the run"
    parts = output.with_name(f"{output.name}.parts")  # a Parquet run's rows until it ends
    where = parts if parts.is_dir() else output
    return f"resuming from row {done + 1:,} of {total:,} ({where} has the rows before it)"


def _by_field(summary: RunSummary) -> str:
    fields: dict[str, int] = {}
    for failure in summary.failures:
        name = str(failure.get("field", "row"))
        fields[name] = fields.get(name, 0) + 1
    return ", ".join(f"{name}: {count}" for name, count in fields.items()) or "invalid rows"


def _gates_json(cases: list[gates.GateCase]) -> list[dict[str, object]]:
    return [
        {"gate": case.name, "passed": case.failure is None, "message": case.failure}
        for case in cases
    ]
