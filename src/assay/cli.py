"""The `assay` command: score one response, list detectors, and register the other commands.

`run` is in `cli_run.py`, `report` in `cli_report.py`, the LLM options in `cli_llm.py`, `metrics`
and `ood` in `assay.metrics.commands`; shared error handling and progress bars in
`cli_common.py`. Exit codes: 0 ran, 1 scoring failed, 2 bad input; never a traceback.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.text import Text

from assay import cli_llm
from assay._sync import run_sync
from assay.cli_common import EXIT_BAD_INPUT, EXIT_FAILED, Explain, JudgeName, reported_errors
from assay.cli_report import report
from assay.cli_run import run
from assay.detectors import DETECTORS
from assay.detectors.evaluate import detect_items, parse_item
from assay.metrics.commands import metrics_app, ood_command
from assay.runner.rows import build_request, check_detector_names, check_judge_name

__all__ = ["EXIT_BAD_INPUT", "EXIT_FAILED", "app"]

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
    explain: Explain = False,
    judge: JudgeName = None,
    no_cache: cli_llm.NoCache = False,
    dry_run: cli_llm.DryRun = False,
    llm: cli_llm.LLMOptions = None,
    cascade_band: cli_llm.CascadeBand = None,
) -> None:
    """Score one response and print the result JSON."""
    with reported_errors(_DETECT_OPTIONS):
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

    with reported_errors({}):
        settings = build_settings(
            database_url=database_url,
            api_keys_file=api_keys_file,
            no_auth=no_auth,
            max_in_flight=max_in_flight,
            max_batch_items=max_batch_items,
            job_lease_seconds=job_lease_seconds,
        )
        run_server(settings, host, port, log_level.lower())


# Dataset runs and reports; their bulk lives in cli_run.py and cli_report.py.
app.command()(run)
app.command()(report)


if __name__ == "__main__":
    app()
