"""`assay metrics list|show`: the manifests of Assay's metrics and detectors."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table

from assay.cli.common import plain_console, reported_errors
from assay.cli.options import JsonOutput
from assay.metrics.manifest import all_manifests, get_manifest, render_manifest
from assay.schema import RequestValidationError

metrics_app = typer.Typer(
    help="List and show the manifests of Assay's metrics and detectors.",
    no_args_is_help=True,
    rich_markup_mode=None,  # plain help, as for every other command (whole at 80 columns)
)


@metrics_app.command("list", short_help="List every metric and detector.")
def list_metrics(as_json: JsonOutput = False) -> None:
    """List every metric and detector with its kind, version and required columns."""
    with reported_errors({}, bad_input=(KeyError, ValueError)):
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
    plain_console().print(table)


@metrics_app.command("show")
def show_metric(
    name: Annotated[str, typer.Argument(help="Metric or detector name, e.g. llm.ood_detection.")],
    as_json: Annotated[
        bool,
        typer.Option("--json/--no-json", help="Print JSON on stdout instead of YAML."),
    ] = False,
    fmt: Annotated[
        str | None,
        typer.Option(
            "--format", "-f", help="yaml (the default) or json (--json is the same as json)."
        ),
    ] = None,
) -> None:
    """Print one manifest in full (YAML; JSON with --json)."""
    with reported_errors({}, bad_input=(KeyError, ValueError)):
        if fmt not in (None, "yaml", "json"):
            raise RequestValidationError("--format", f"must be yaml or json (got {fmt!r})")
        if as_json and fmt == "yaml":
            raise RequestValidationError(
                "--format", "yaml and --json ask for two formats; give one"
            )
        text = render_manifest(get_manifest(name), "json" if as_json or fmt == "json" else "yaml")
    typer.echo(text.rstrip("\n"))
