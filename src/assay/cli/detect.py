"""`assay detect` (score one response) and `assay detectors` (list them)."""

from __future__ import annotations

import contextlib
import json
from typing import Annotated, Any

import typer
from rich.text import Text

from assay._sync import run_sync
from assay.cli.common import (
    EXIT_INTERRUPTED,
    fail,
    plain_console,
    print_plan,
    reported_errors,
    terminate_as_interrupt,
)
from assay.cli.options import (
    LLM_OPTION_LABELS,
    CascadeBand,
    DryRun,
    Explain,
    JsonOutput,
    JudgeName,
    LLMOptions,
    UseCache,
    apply_llm_options,
    check_llm_options_apply,
)
from assay.detectors import DETECTORS
from assay.detectors.evaluate import detect_items, parse_item
from assay.runner.gates import describe_result
from assay.runner.rows import build_request, check_detector_names, check_judge_name
from assay.schema import INPUT_FAILURES, DetectorFailed, RequestValidationError

#: How request fields are spelled on the command line, for error messages.
_DETECT_OPTIONS = {
    "user_query": "--query",
    "generated_text": "--response",
    "context": "--context",
    "detector": "--detector",
    "judge": "--judge",
    **LLM_OPTION_LABELS,
}


def detect_command(
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
            metavar="NAME",
            help="Detector to run (repeatable); default: every one whose inputs are given.",
        ),
    ] = None,
    explain: Explain = True,
    as_json: JsonOutput = False,
    judge: JudgeName = None,
    cache: UseCache = None,
    dry_run: DryRun = False,
    llm: LLMOptions = None,
    cascade_band: CascadeBand = None,
) -> None:
    """Score one response: each instruction's verdict, probability and explanation.

    With --json, the response exactly as the API returns it: an array of one item.
    """
    with reported_errors(_DETECT_OPTIONS):
        check_llm_options_apply(judge, cache, llm, cascade_band)
        apply_llm_options(cache, llm, cascade_band)
        if detector:
            check_detector_names(detector)
        if judge is not None:
            check_judge_name(judge)
        fields: dict[str, Any] = {"generated_text": response}
        if query is not None:
            fields["user_query"] = query
        if context:
            if any(not document.strip() for document in context):
                # Dropped, it would have turned completeness off in silence.
                raise RequestValidationError(
                    "context", "must not be empty (leave --context out to judge without one)"
                )
            fields["context"] = list(context)
        item = parse_item(build_request(fields, detector, explain, must_compute="all_or_none"))
        if dry_run:
            from assay.runner.plan import llm_judge_settings, plan_items

            print_plan(llm_judge_settings(), *plan_items([item], judge), as_json=as_json)
            return
        # An LLM judge can take a minute: say that work is going on (on a terminal only).
        console = plain_console(stderr=True)
        working = console.status("judging…") if console.is_terminal else contextlib.nullcontext()
        try:
            with working, terminate_as_interrupt():
                results = run_sync(detect_items([item], judge))
        except KeyboardInterrupt:
            # Said, as `assay run` says it (the CLI framework ends a Ctrl-C with no word).
            raise fail("interrupted: nothing was scored", EXIT_INTERRUPTED) from None
        except DetectorFailed as error:
            if error.failure.kind not in INPUT_FAILURES:
                raise
            # The input's fault, as the server's 422 says: name the option that carried it.
            said = error.failure.message
            field = next((f for f in ("context", "user_query") if said.startswith(f)), None)
            raise RequestValidationError(field or "generated_text", said) from None
    if as_json:
        typer.echo(json.dumps(results, indent=2, ensure_ascii=False))
        return
    # Markup is off on every console: an answer's "[see note 3]" or "[/]" is text (it
    # vanished, or crashed the command).
    console = plain_console(soft_wrap=True)
    for name, result in results[0].items():
        console.print(describe_result(name, result))


def detectors_command(as_json: JsonOutput = False) -> None:
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
    console = plain_console(soft_wrap=True)
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
