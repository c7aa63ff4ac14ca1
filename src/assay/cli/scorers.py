"""`assay run`'s flags turned into what scores rows: a `DetectorScorer` or a `MetricScorer`,
with `--map` parsed and the stream batch size a metric's manifest asks for."""

from __future__ import annotations

from pathlib import Path

from assay.runner.metric_rows import MetricScorer, check_metric_name, read_config_text
from assay.runner.rows import DetectorScorer
from assay.schema import RequestValidationError


def run_scorer(
    detector: list[str] | None,
    metric: str | None,
    config: Path | None,
    explain: bool | None,
    judge: str | None,
    column: list[str] | None,
) -> DetectorScorer | MetricScorer:
    """The scorer for `--detector`/`--metric`, `--config`, `--explain`, `--judge` and `--map`;
    RequestValidationError naming the option when they do not go together."""
    column_map = parse_column_map(column or [])
    if metric is None:
        if config is not None:
            raise RequestValidationError("config", "only applies with --metric")
        # Neither flag: each row's own `explain` holds, and a row that does not say is explained
        # (the wire default): explanations are what a reader of the report triages.
        return DetectorScorer(tuple(detector) if detector else None, explain, judge, column_map)
    if detector:
        raise RequestValidationError("detector", "give --detector or --metric, not both")
    if judge is not None:
        raise RequestValidationError("judge", "metrics choose their judge from the environment")
    check_metric_name(metric)
    return MetricScorer(metric, read_config_text(config), bool(explain), column_map)


def parse_column_map(specs: list[str]) -> tuple[tuple[str, str], ...]:
    """`["generated_text=answer"]` -> `(("generated_text", "answer"),)`; field "map" on error."""
    pairs = []
    for spec in specs:
        wanted, sep, present = spec.partition("=")
        if not sep or not wanted.strip() or not present.strip():
            raise RequestValidationError("map", f"expected FIELD=COLUMN, got {spec!r}")
        pairs.append((wanted.strip(), present.strip()))
    return tuple(pairs)
