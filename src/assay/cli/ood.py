"""`assay ood`: probe a live system with in-domain and out-of-domain questions, judge its
behaviour, print every verdict, a summary and any warnings (bank fallbacks, probe shortfalls).

Errors end in one red line on stderr naming the option or field, never a traceback.
Exit codes as elsewhere: 0 ran, 1 the run failed, 2 bad input.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.console import Console
from rich.table import Table
from rich.text import Text

from assay._sync import run_sync
from assay.cli.common import EXIT_FAILED, fail, print_usage, progress_bar, reported_errors, warn
from assay.cli.options import JsonOutput
from assay.judges.usage import Usage
from assay.metrics.ood.config import OODMetricConfig, parse_config
from assay.metrics.ood.profile import UseCaseProfile, load_profile
from assay.metrics.ood.run_config import build_sut
from assay.metrics.ood.scorer import RowResult, score_rows
from assay.metrics.ood.summary import OODSummary, summarize
from assay.schema import RequestValidationError

#: How `sut` keys are spelled on the command line, for error messages.
_SUT_OPTIONS = {"kind": "--sut-kind", "url": "--sut-url", "body_template": "--body-template"}


def _config(
    path: Path | None, num_ood_queries: int | None, profile: UseCaseProfile
) -> OODMetricConfig:
    values: dict[str, Any] = {}
    if path is not None:
        try:
            loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as error:
            raise RequestValidationError("--config", f"cannot read {path}: {error}") from None
        if not isinstance(loaded, dict):
            raise RequestValidationError("--config", f"{path} must hold a mapping of config keys")
        values.update(loaded)
    if num_ood_queries is not None:
        values["num_ood_queries"] = num_ood_queries
    values["use_case"] = profile.fields
    return parse_config(values)


def ood_command(
    use_case: Annotated[
        Path, typer.Option("--use-case", help="Use-case profile file (YAML or JSON).")
    ],
    sut_url: Annotated[str, typer.Option("--sut-url", help="URL of the system under test.")],
    sut_kind: Annotated[
        str, typer.Option("--sut-kind", help="openai (chat completions API root) or http.")
    ] = "openai",
    num_ood_queries: Annotated[
        int | None, typer.Option("--num-ood-queries", help="Probes per in-domain question (1-32).")
    ] = None,
    config: Annotated[
        Path | None, typer.Option("--config", help="YAML file of llm.ood_detection config keys.")
    ] = None,
    model: Annotated[str, typer.Option("--model", help="Model name for --sut-kind openai.")] = (
        "default"
    ),
    body_template: Annotated[
        str, typer.Option("--body-template", help='JSON body for http, with "{prompt}".')
    ] = '{"message": "{prompt}"}',
    reply_path: Annotated[
        str, typer.Option("--reply-path", help="Dotted path to the reply in http responses.")
    ] = "reply",
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
        Path | None, typer.Option("--out", "-o", help="Also write per-row results as JSONL.")
    ] = None,
) -> None:
    """Probe a live system with in-domain and out-of-domain questions and judge its behaviour.

    The in-domain questions are the profile's `examples` (one per line); each gets
    --num-ood-queries probes. Set ASSAY_SUT_API_KEY for an endpoint that needs a key.
    """
    with reported_errors({}, bad_input=(KeyError, ValueError)):
        profile = load_profile(use_case)
        settings = _config(config, num_ood_queries, profile)
        examples = profile.examples()
        if not examples:
            raise RequestValidationError(
                "--use-case", f"{use_case} has no `examples`: list in-domain questions, one a line"
            )
        rows = [
            {"input_id": f"example-{n}", "prompt": text, "sut_response": None}
            for n, text in enumerate(examples, start=1)
        ]
        options = {"kind": sut_kind, "url": sut_url, "model": model, "system_prompt": system_prompt}
        if sut_kind == "http":
            options.update(body_template=body_template, reply_path=reply_path)
        sut = build_sut(options, settings, _SUT_OPTIONS)

        async def run(report: Callable[[int], None]) -> list[RowResult]:
            try:
                return await score_rows(
                    rows, settings, sut=sut, explain=explain, on_progress=report
                )
            finally:
                await sut.aclose()

        with progress_bar("probing") as (progress, task):
            progress.update(task, total=len(rows))
            results = run_sync(run(lambda done: progress.update(task, completed=done)))
        if out is not None:
            with out.open("w", encoding="utf-8") as handle:
                for result in results:
                    handle.write(json.dumps(result.to_dict(), ensure_ascii=False) + "\n")
    summary = summarize(results)
    if as_json:
        rows = [result.to_dict() for result in results]
        typer.echo(json.dumps({"rows": rows, "summary": asdict(summary)}, indent=2))
    else:
        _print_cases(results, explain)
    if not as_json:
        _print_summary(summary, profile)
    print_probe_warnings(summary)
    usage = Usage()
    for result in results:
        usage.add(Usage.from_dict(dict(result.usage)))
    if not as_json:
        print_usage(usage, sum(1 for r in results if r.usage.get("calls")), len(results))
    if out is not None and not as_json:
        Console(highlight=False).print(f"wrote {out}", soft_wrap=True)
    if summary.rows_scored == 0:
        raise fail(
            f"no row could be scored ({summary.transport_failures} failed calls to the system "
            f"under test, {summary.judge_failures} judge failures); see the verdicts above",
            EXIT_FAILED,
        )


def _print_cases(results: list[RowResult], explain: bool) -> None:
    table = Table(title="verdicts")
    for column in ("row", "case", "query", "reply", "verdict", "p"):
        table.add_column(column, overflow="fold")
    if explain:
        table.add_column("evidence", overflow="fold")
    for result in results:
        for case in result.cases:
            verdict = case.label or case.status
            style = "green" if case.correct else "red"
            cells: list[str | Text] = [
                result.input_id,
                case.role
                + (" (near)" if case.near_domain else "")
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
    Console(highlight=False).print(table)


def _print_summary(summary: OODSummary, profile: UseCaseProfile) -> None:
    table = Table(title=f"llm.ood_detection — {profile.name}")
    table.add_column("measure", style="bold")
    table.add_column("value", justify="right")

    def show(value: float | None) -> str:
        return "–" if value is None else f"{value:.3f}"

    interval = summary.score_interval
    table.add_row("rows scored / errored", f"{summary.rows_scored} / {summary.rows_errored}")
    table.add_row("mean score", show(summary.mean_score))
    table.add_row(
        "95% bootstrap interval",
        "–" if interval is None else f"{interval[0]:.3f}–{interval[1]:.3f}",
    )
    for label, count in summary.confusion.items():
        table.add_row(label, str(count))
    table.add_row("over-rejection rate", show(summary.over_rejection_rate))
    table.add_row("missed-refusal rate", show(summary.missed_refusal_rate))
    table.add_row("transport failures", str(summary.transport_failures))
    table.add_row("judge failures", str(summary.judge_failures))
    Console(highlight=False).print(table)


def print_probe_warnings(summary: OODSummary) -> None:
    """Warn on the terminal about probes the bank wrote in place of the LLM and rows that got
    fewer probes than asked, with why (both are in the summary and on each case too)."""
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
