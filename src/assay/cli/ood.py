"""`assay ood`: probe a live system with in-domain and out-of-domain questions, judge its
behaviour, print every verdict and the summary, and apply CI gates.

Before the run one question goes to the system under test: if it fails (unreachable, or a reply
that does not fit `--sut-kind`), the command stops with the error and, when the reply's shape
says so, a hint at the other kind. `--out` writes the same output lines and summary file as
`assay run --metric llm.ood_detection`, which `assay report` reads.

Errors end in one red line on stderr naming the option or field, never a traceback.
Exit codes as elsewhere: 0 ran and every gate passed, 1 a gate failed, 2 bad input (including a
system under test that does not answer), 3 some rows could not be scored (0 with
`--allow-errors`). The JUnit file follows the same rule.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from dataclasses import asdict
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.table import Table
from rich.text import Text

# Typer vendors its own Click: its context is the one the command runs in (version pinned).
from typer._click.core import ParameterSource
from typer._click.globals import get_current_context

from assay._sync import run_sync
from assay.cli.common import (
    EXIT_INTERRUPTED,
    fail,
    ignore_further_interrupts,
    note,
    outcome_code,
    plain_console,
    print_usage,
    progress_bar,
    reported_errors,
    terminate_as_interrupt,
    warn,
)
from assay.cli.options import AllowErrors, JsonOutput, Junit, number_option, rate
from assay.judges.usage import Usage
from assay.metrics.ood import METRIC_NAME
from assay.metrics.ood.config import OODMetricConfig, parse_config
from assay.metrics.ood.preflight import preflight
from assay.metrics.ood.profile import UseCaseProfile, load_profile, not_utf8, parse_file_text
from assay.metrics.ood.run_config import build_sut
from assay.metrics.ood.scorer import RowResult, score_rows
from assay.metrics.ood.summary import OODSummary, OODTally
from assay.report.ood_tables import ood_tables
from assay.runner.gates import refuse_inverted
from assay.runner.local import write_summary
from assay.runner.metric_rows import metric_line
from assay.runner.ood_gates import (
    DEFAULT_MAX_MISSED_REFUSAL,
    DEFAULT_MAX_OVER_REJECTION,
    ood_gates,
    tally_figures,
    write_ood_junit,
)
from assay.runner.output import (
    check_not_overwriting,
    check_output_path,
    check_writable,
    files_beside,
    summary_path_for,
)
from assay.runner.writers import writer_for
from assay.schema import RequestValidationError

#: How fields are spelled on the command line, for error messages.
_SUT_OPTIONS = {
    "kind": "--sut-kind",
    "url": "--sut-url",
    "model": "--model",
    "system_prompt": "--system-prompt",
    "body_template": "--body-template",
    "reply_path": "--reply-path",
    "out": "--out",
    "junit": "--junit",
    "fail_under": "--fail-under",
}


#: Finite here; its range is checked once the config (min, max) is known.
_finite = number_option("a finite number")

_DEFAULT_NUM_OOD_QUERIES = OODMetricConfig.model_fields["num_ood_queries"].default
_DEFAULT_MODEL = "default"
_DEFAULT_BODY_TEMPLATE = '{"message": "{prompt}"}'
_DEFAULT_REPLY_PATH = "reply"


class SUTKind(StrEnum):
    """How `assay ood` talks to the system under test."""

    openai = "openai"
    http = "http"


def _sut_options(kind: str, url: str, values: dict[str, Any]) -> dict[str, Any]:
    """The `sut:` block the command line makes: kind, url and the kind options it was given.

    An option given for the other kind stays in, so `build_sut` refuses it by name; one left
    at its default is left out (whatever the value), so the adapter's own default applies.
    """
    context = get_current_context()
    given = {
        name: value
        for name, value in values.items()
        if context.get_parameter_source(name) not in (ParameterSource.DEFAULT, None)
    }
    return {"kind": kind, "url": url, **given}


def _config(
    path: Path | None, num_ood_queries: int | None, profile: UseCaseProfile
) -> OODMetricConfig:
    values: dict[str, Any] = {}
    if path is not None:
        try:
            loaded = parse_file_text(path.read_text(encoding="utf-8"), path)
        except UnicodeDecodeError as error:
            raise RequestValidationError("--config", f"{path} {not_utf8(error)}") from None
        except (OSError, ValueError, yaml.YAMLError) as error:
            raise RequestValidationError("--config", f"cannot read {path}: {error}") from None
        if not isinstance(loaded, dict):
            raise RequestValidationError("--config", f"{path} must hold a mapping of config keys")
        values.update(loaded)
    if "use_case" in values:
        note(f"--use-case replaces {path}'s use_case")
    values["use_case"] = profile.fields
    if path is not None:
        try:
            parse_config(values)  # the file's own values, before a flag replaces one of them
        except RequestValidationError as error:
            raise RequestValidationError("--config", f"{path}: {error}") from None
    # The command line wins over the config file; say so rather than drop a value in silence.
    if num_ood_queries is not None:
        if values.get("num_ood_queries", num_ood_queries) != num_ood_queries:
            note(f"--num-ood-queries {num_ood_queries} replaces {path}'s num_ood_queries")
        values["num_ood_queries"] = num_ood_queries
    try:
        return parse_config(values)
    except RequestValidationError as error:
        if error.field == "num_ood_queries" and num_ood_queries is not None:
            raise RequestValidationError("--num-ood-queries", error.message) from None
        raise


def ood_command(
    use_case: Annotated[
        Path, typer.Option("--use-case", help="Use-case profile file (YAML or JSON).")
    ],
    sut_url: Annotated[str, typer.Option("--sut-url", help="URL of the system under test.")],
    sut_kind: Annotated[
        SUTKind, typer.Option("--sut-kind", help="openai (chat completions API root) or http.")
    ] = SUTKind.openai,
    num_ood_queries: Annotated[
        int | None,
        typer.Option(
            "--num-ood-queries",
            help=f"Probes per in-domain question (1-32; default {_DEFAULT_NUM_OOD_QUERIES}, or "
            "the --config file's num_ood_queries).",
        ),
    ] = None,
    config: Annotated[
        Path | None, typer.Option("--config", help="YAML file of llm.ood_detection config keys.")
    ] = None,
    model: Annotated[
        str, typer.Option("--model", help="Model name for --sut-kind openai.")
    ] = _DEFAULT_MODEL,
    body_template: Annotated[
        str, typer.Option("--body-template", help='JSON body for http, with "{prompt}".')
    ] = _DEFAULT_BODY_TEMPLATE,
    reply_path: Annotated[
        str, typer.Option("--reply-path", help="Dotted path to the reply in http responses.")
    ] = _DEFAULT_REPLY_PATH,
    system_prompt: Annotated[
        bool,
        typer.Option(
            "--system-prompt/--no-system-prompt",
            help="Send the profile as system prompt (openai kind).",
        ),
    ] = False,
    explain: Annotated[
        bool, typer.Option("--explain/--no-explain", help="Show the judge's evidence.")
    ] = False,
    as_json: JsonOutput = False,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", "-o", help="Write output lines (.jsonl or .parquet) and a summary file."
        ),
    ] = None,
    fail_under: Annotated[
        float | None,
        typer.Option(
            "--fail-under",
            callback=_finite,
            help="Fail when the mean score is lower (on the score's scale: 0-1 unless the "
            "config's min/max rescale it).",
        ),
    ] = None,
    max_over_rejection: Annotated[
        float,
        typer.Option(
            "--max-over-rejection",
            callback=rate,
            help="Fail above this over-rejection rate (0-1).",
        ),
    ] = DEFAULT_MAX_OVER_REJECTION,
    max_missed_refusal: Annotated[
        float,
        typer.Option(
            "--max-missed-refusal",
            callback=rate,
            help="Fail above this missed-refusal rate (0-1).",
        ),
    ] = DEFAULT_MAX_MISSED_REFUSAL,
    junit: Junit = None,
    allow_errors: AllowErrors = False,
) -> None:
    """Probe a live system with in-domain and out-of-domain questions and judge its behaviour.

    The in-domain questions are the profile's `examples` (one per line); each gets
    --num-ood-queries probes. Set ASSAY_SUT_API_KEY for an endpoint that needs a key.
    """
    with reported_errors(_SUT_OPTIONS, bad_input=(KeyError, ValueError)):
        if out is not None:
            check_output_path(out)
            # A .jsonl profile or config is readable too: removed below as stale, it was lost.
            inputs = {"the --use-case file": use_case, "the --config file": config}
            check_not_overwriting(out, "out", inputs)
            check_not_overwriting(summary_path_for(out), "out", inputs)
        if junit is not None:
            check_writable(junit, "junit")
            kept = {"the --use-case file": use_case, "the --config file": config, "--out": out}
            kept |= files_beside(out, "--out")
            check_not_overwriting(junit, "junit", kept)
        # What an earlier run wrote there goes first: a run that stops (a bad option, an
        # unreachable system, Ctrl-C) must not leave a passing JUnit file or last run's output
        # behind its exit code.
        for stale in (out, out and summary_path_for(out), junit):
            if stale is not None and stale.is_file():
                stale.unlink()
        try:
            profile = load_profile(use_case)
        except RequestValidationError as error:  # named by the option, like every user error
            raise RequestValidationError("--use-case", str(error)) from None
        settings = _config(config, num_ood_queries, profile)
        # The gate reads the score users see, so it lives on that score's scale.
        if fail_under is not None and settings.inverted:
            refuse_inverted({METRIC_NAME: fail_under}, [METRIC_NAME])
        low, high = sorted((settings.min, settings.max))
        if fail_under is not None and not low <= fail_under <= high:
            raise RequestValidationError(
                "fail_under", f"must be between {low:g} and {high:g}, the score's range"
            )
        examples = profile.examples()
        if not examples:
            raise RequestValidationError(
                "--use-case", f"{use_case} has no `examples`: list in-domain questions, one a line"
            )
        rows = [
            {"input_id": f"example-{n}", "prompt": text, "sut_response": None}
            for n, text in enumerate(examples, start=1)
        ]
        kind_values = {
            "model": model,
            "system_prompt": system_prompt,
            "body_template": body_template,
            "reply_path": reply_path,
        }
        options = _sut_options(sut_kind.value, sut_url, kind_values)
        sut = build_sut(options, settings, _SUT_OPTIONS)
        results: list[RowResult] | None = None

        async def run(report: Callable[[int], None]) -> list[RowResult]:
            try:
                await preflight(sut, examples[0], settings)
                return await score_rows(
                    rows, settings, sut=sut, explain=explain, on_progress=report
                )
            finally:
                await sut.aclose()

        probed = 0

        def report(done: int) -> None:
            nonlocal probed
            probed = done
            progress.update(task, completed=done)

        with progress_bar("probing") as (progress, task):
            progress.update(task, total=len(rows), completed=0)  # where this run starts
            with terminate_as_interrupt(), contextlib.suppress(KeyboardInterrupt):
                results = run_sync(run(report))
            if results is None:
                ignore_further_interrupts()
        if results is None:  # interrupted; said once the progress bar has stopped
            raise fail(
                f"interrupted after {probed} of {len(rows)} in-domain questions were probed; "
                "`assay ood` writes nothing until the end (`assay run --metric "
                "llm.ood_detection` keeps finished rows and resumes)",
                EXIT_INTERRUPTED,
            )
        lines = [
            metric_line(METRIC_NAME, n, row, result)
            for n, (row, result) in enumerate(zip(rows, results, strict=True), start=1)
        ]
        tally = OODTally()
        for line in lines:
            tally.add(line[METRIC_NAME])
        summary = tally.summary()
        figures = tally_figures(tally, floor=settings.min)
        gates = ood_gates(summary, figures, fail_under, max_over_rejection, max_missed_refusal)
        gate_data = [
            {"gate": g.name, "value": g.value, "passed": g.passed, "message": g.message}
            for g in gates
        ]
        if out is not None:
            _write_out(out, use_case, lines, gate_data)
    if junit is not None:
        write_ood_junit(lines, junit, gates, METRIC_NAME, allow_errors)
    if as_json:
        document = {"rows": lines, "summary": asdict(summary), "gates": gate_data}
        typer.echo(json.dumps(document, indent=2, ensure_ascii=False))
    else:
        _print_cases(results, explain)
        print_ood_summary(summary, f"{METRIC_NAME} — {profile.name}")
        usage = Usage()
        for result in results:
            usage.add(Usage.from_dict(dict(result.usage)))
        print_usage(usage, sum(1 for r in results if r.usage.get("calls")), len(results))
        console = plain_console()
        for gate in gates:
            style = "green" if gate.passed else "bold red"
            console.print(Text(f"{'pass' if gate.passed else 'FAIL'}  {gate.message}", style))
        if out is not None:
            console.print(f"wrote {out} and {out}.summary.json", soft_wrap=True)
        if junit is not None:
            console.print(f"wrote {junit}", soft_wrap=True)
    failed = [gate.message for gate in gates if not gate.passed]
    code = outcome_code(failed, summary.rows_errored, allow_errors)
    if failed and code:
        raise fail("; ".join(failed), code)
    if code:
        raise fail(
            f"{summary.rows_errored} of {summary.rows} rows could not be scored "
            f"({summary.transport_failures} failed calls to the system under test, "
            f"{summary.judge_failures} judge failures); see the verdicts above",
            code,
        )


def _write_out(
    out: Path, use_case: Path, lines: list[dict[str, Any]], gate_data: list[dict[str, Any]]
) -> None:
    """The output lines and their summary file, which also holds the gates as `--json` prints
    them (so a CI job that keeps only the files still has them)."""
    # `check_output_path` looked before the run; a folder can still change under a long run.
    try:
        writer = writer_for(out, (METRIC_NAME,))
        writer.start(None)
        writer.write_batch(lines)
        writer.finish()
        write_summary(use_case, out, (METRIC_NAME,), extra={"gates": gate_data})
    except OSError as error:
        reason = error.strerror or str(error)
        raise RequestValidationError("out", f"cannot write {out}: {reason}") from None


def _print_cases(results: list[RowResult], explain: bool) -> None:
    table = Table(title="verdicts")
    for column in ("row", "case", "query", "reply", "verdict", "p"):
        table.add_column(column, overflow="fold")
    if explain:
        table.add_column("evidence", overflow="fold")
    for result in results:
        for case in result.cases:
            verdict: str = case.label or case.status
            if case.scope_flagged:
                verdict += " (probe looks in scope)"
            style = "green" if case.correct else "red"
            cells: list[str | Text] = [
                result.input_id,
                case.kind.replace("_", "-")
                + (f" (bank: {case.fallback})" if case.fallback else ""),
                case.query,
                (case.reply or case.error or "")[:120],
                Text(verdict, style=style),
                "" if case.probability is None else f"{case.probability:.2f}",
            ]
            if explain:
                cells.append("; ".join(f"{key}: {value}" for key, value in case.evidence.items()))
            table.add_row(*cells)
        table.add_section()
    plain_console().print(table)


def print_ood_summary(summary: OODSummary, title: str) -> None:
    """Print the OOD summary tables (`report.ood_tables`) and any warnings (shared with
    `assay run --metric`)."""
    console = plain_console()
    for table in ood_tables(summary, title):
        console.print(table)
    print_probe_warnings(summary)


def print_probe_warnings(summary: OODSummary) -> None:
    """Warn on the terminal about probes the bank wrote in place of the LLM, rows that got
    fewer probes than asked, and probes the judge finds in scope (all also in the summary)."""
    fallbacks = summary.probe_fallbacks
    if fallbacks.get("llm_failed"):
        warn(
            f"{fallbacks['llm_failed']} probes were written from the probe bank because the "
            "LLM call failed (each such case says why in `fallback_reason`)"
        )
    if fallbacks.get("llm_short"):
        warn(
            f"{fallbacks['llm_short']} probes were written from the probe bank because too few "
            "of the LLM's probes were out of scope"
        )
    for reason, rows in summary.probe_shortfalls.items():
        warn(f"{rows} rows got fewer probes than num_ood_queries: {reason}")
    if summary.scope_flagged:
        warn(
            f"{summary.scope_flagged} probes look in scope to the judge (possibly mislabelled; "
            "they keep their intended scope; see `scope_flagged` on their cases)"
        )
