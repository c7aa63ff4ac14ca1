"""The `assay` command: score one response, list detectors, score a dataset file.

Every error ends in one red line on stderr naming the field and what was wrong, never a
traceback. Exit codes: 0 ran, 1 scoring failed (e.g. the judge could not load), 2 bad input.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
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
    TextColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

from assay import cli_llm
from assay._sync import run_sync
from assay.detectors import DETECTORS
from assay.detectors.evaluate import detect_items, parse_item
from assay.runner.io import count_rows
from assay.runner.local import (
    DEFAULT_BATCH_SIZE,
    build_request,
    check_detector_names,
    check_judge_name,
    run_file,
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
    "batch_size": "--batch-size",
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


@app.command()
def run(
    file: Annotated[Path, typer.Argument(help="Dataset to score: .jsonl or .csv.")],
    detector: Annotated[
        list[str] | None,
        typer.Option(
            "--detector",
            "-d",
            help="Detector to run (repeatable); default: per row, every one it has inputs for.",
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Output JSONL (default: <input stem>.scored.jsonl)."),
    ] = None,
    explain: Annotated[bool, typer.Option("--explain", help="Include explanations.")] = False,
    judge: Annotated[
        str | None,
        typer.Option("--judge", help="Judge backend: embedded (default), openai or cascade."),
    ] = None,
    batch_size: Annotated[
        int, typer.Option("--batch-size", min=1, help="Rows per judge call.")
    ] = DEFAULT_BATCH_SIZE,
    no_cache: cli_llm.NoCache = False,
    dry_run: cli_llm.DryRun = False,
    llm: cli_llm.LLMOptions = None,
    cascade_band: cli_llm.CascadeBand = None,
) -> None:
    """Score every row of a JSONL or CSV file; write one JSON line per row and a summary."""
    with _reported_errors(_RUN_OPTIONS):
        cli_llm.apply_llm_options(no_cache, llm, cascade_band)
        # Checked up front too, so an unusable run fails before a progress bar is drawn.
        if detector:
            check_detector_names(detector)
        if judge is not None:
            check_judge_name(judge)
        if dry_run:
            cli_llm.print_plan(*cli_llm.plan_rows(file, detector, explain, judge))
            return
        total = count_rows(file)
        progress = Progress(
            TextColumn("scoring"),
            BarColumn(),
            MofNCompleteColumn(),
            _RateColumn(),
            TimeRemainingColumn(),
            console=Console(stderr=True),
        )
        with progress:
            task = progress.add_task("scoring", total=total)
            summary = run_file(
                file,
                out,
                detectors=detector,
                explain=explain,
                judge=judge,
                batch_size=batch_size,
                on_progress=lambda done: progress.update(task, completed=done),
            )
    _print_summary(summary)


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


if __name__ == "__main__":
    app()
