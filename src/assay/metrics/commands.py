"""The bulk of `assay metrics list|show` and `assay ood`; `assay.cli` only registers them.

Errors end in one red line on stderr naming the option or field, never a traceback.
Exit codes as elsewhere: 0 ran, 1 the run failed, 2 bad input.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table
from rich.text import Text

from assay._sync import run_sync
from assay.cli_common import EXIT_BAD_INPUT, EXIT_FAILED, fail
from assay.metrics.manifest import all_manifests, get_manifest, render_manifest
from assay.metrics.ood.config import OODMetricConfig, parse_config
from assay.metrics.ood.profile import UseCaseProfile, load_profile
from assay.metrics.ood.run_config import build_sut
from assay.metrics.ood.scorer import RowResult, score_rows
from assay.metrics.ood.summary import OODSummary, summarize
from assay.schema import RequestValidationError

#: How `sut` keys are spelled on the command line, for error messages.
_SUT_OPTIONS = {"kind": "--sut-kind", "url": "--sut-url", "body_template": "--body-template"}

metrics_app = typer.Typer(
    help="List and show the manifests of Assay's metrics and detectors.", no_args_is_help=True
)


@contextmanager
def _one_line_errors() -> Iterator[None]:
    try:
        yield
    except typer.Exit:
        raise
    except RequestValidationError as error:
        raise fail(f"{error.field}: {error.message}", EXIT_BAD_INPUT) from None
    except (KeyError, ValueError) as error:
        message = error.args[0] if error.args else str(error)
        raise fail(str(message), EXIT_BAD_INPUT) from None
    except Exception as error:  # anything else still gets one line, not a traceback
        raise fail(f"{type(error).__name__}: {error}", EXIT_FAILED) from None


@metrics_app.command("list")
def list_metrics(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """List every metric and detector with its kind, version and required columns."""
    with _one_line_errors():
        manifests = all_manifests()
    if as_json:
        listing = [
            {
                "name": m.name,
                "kind": m.kind,
                "version": m.version,
                "display_name": m.display_name,
                "required_columns": m.required_columns,
                "summary": m.metric_metadata.summary,
            }
            for m in manifests.values()
        ]
        typer.echo(json.dumps(listing, indent=2, ensure_ascii=False))
        return
    table = Table(title="Assay metrics and detectors")
    table.add_column("name", no_wrap=True, style="bold cyan")
    for column in ("kind", "version", "required columns", "summary"):
        table.add_column(column)
    for m in manifests.values():
        table.add_row(
            m.name, m.kind, m.version, ", ".join(m.required_columns), m.metric_metadata.summary
        )
    Console(highlight=False).print(table)


@metrics_app.command("show")
def show_metric(
    name: Annotated[str, typer.Argument(help="Metric or detector name, e.g. llm.ood_detection.")],
    fmt: Annotated[
        str, typer.Option("--format", "-f", help="Output format: yaml or json.")
    ] = "yaml",
) -> None:
    """Print one manifest in full."""
    with _one_line_errors():
        if fmt not in ("yaml", "json"):
            raise RequestValidationError("--format", f"must be yaml or json (got {fmt!r})")
        text = render_manifest(get_manifest(name), "json" if fmt == "json" else "yaml")
    typer.echo(text.rstrip("\n"))


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


@contextmanager
def _progress(total: int) -> Iterator[Any]:
    progress = Progress(
        TextColumn("probing"), BarColumn(), MofNCompleteColumn(), console=Console(stderr=True)
    )
    with progress:
        task = progress.add_task("probing", total=total)
        yield lambda done: progress.update(task, completed=done)


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
        typer.Option("--system-prompt", help="Send the profile as system prompt (openai kind)."),
    ] = False,
    explain: Annotated[bool, typer.Option("--explain", help="Show the judge's evidence.")] = False,
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="Also write per-row results as JSONL.")
    ] = None,
) -> None:
    """Probe a live system with in-domain and out-of-domain questions and judge its behaviour.

    The in-domain questions are the profile's `examples` (one per line); each gets
    --num-ood-queries probes. Set ASSAY_SUT_API_KEY for an endpoint that needs a key.
    """
    with _one_line_errors():
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

        async def run(report: Any) -> list[RowResult]:
            try:
                return await score_rows(
                    rows, settings, sut=sut, explain=explain, on_progress=report
                )
            finally:
                await sut.aclose()

        with _progress(len(rows)) as report:
            results = run_sync(run(report))
        if out is not None:
            with out.open("w", encoding="utf-8") as handle:
                for result in results:
                    handle.write(json.dumps(result.to_dict(), ensure_ascii=False) + "\n")
    _print_cases(results, explain)
    summary = summarize(results)
    _print_summary(summary, profile)
    if out is not None:
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
                case.role + (" (near)" if case.near_domain else ""),
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
