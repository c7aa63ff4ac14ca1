"""Score dataset rows with a metric that has a manifest (`assay run --metric NAME`).

Today that is `llm.ood_detection`: each row (`gdi_text_v1`: `input_id`, `prompt`,
`sut_response`) gets probes put to the live system under test named in the run config's `sut:`
block, and the judged cases roll up into the row's score. The output line carries the metric's
result under its name, like a detector's: `{"input_id", "score", "accuracy", "correct", "total",
"weight", "cases": [...], "warnings"}` (and `"score_range": [min, max]` when the config
rescales the score, `"inverted": true` when it inverts it), or `{"error": true, "kind",
"message", "cases"}` when a call or a judgement failed (never a made-up score). `assay ood
--out` writes the same lines (`metric_line`), so `assay report` reads both.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import yaml

from assay.detectors import DETECTORS
from assay.judges.openai.settings import configured_settings
from assay.metrics.manifest import all_manifests
from assay.metrics.ood import build_sut, parse_run_config, score_rows
from assay.metrics.ood.config import OODMetricConfig
from assay.metrics.ood.preflight import preflight
from assay.metrics.ood.profile import (
    load_yaml,
    not_utf8,
    parse_file_text,
    profile_from_mapping,
)
from assay.metrics.ood.rows import REQUIRED_COLUMNS
from assay.metrics.ood.run_config import read_use_case
from assay.metrics.ood.scorer import RowResult
from assay.metrics.ood.sut import SystemUnderTest
from assay.runner.columns import sample_columns, suggested_map
from assay.runner.io import Row, UnreadableRow, input_columns
from assay.runner.rows import INVALID_ROW, apply_column_map
from assay.schema import RequestValidationError
from assay.stats import ScoreScale

#: Metrics `assay run` can score, by manifest name.
RUNNABLE_METRICS = ("llm.ood_detection",)


def check_metric_name(name: str) -> None:
    """Raise RequestValidationError (field "metric") for a name `assay run` cannot score."""
    if name in DETECTORS:
        raise RequestValidationError("metric", f"{name!r} is a detector: use --detector {name}")
    if name not in RUNNABLE_METRICS:
        known = ", ".join(RUNNABLE_METRICS)
        what = "has no dataset runner" if name in all_manifests() else "is not a metric"
        raise RequestValidationError("metric", f"{name!r} {what}; metrics you can run: {known}")


def read_config_text(path: Path | None) -> str:
    """The run config file's text ("" when there is none), read once so runs fingerprint it.

    A `use_case` given as a profile file's path is read here, relative to the config file, and
    the text returned holds the profile itself: the fingerprint then covers what the profile
    says, and the config means the same whatever the working folder.
    """
    if path is None:
        return ""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise RequestValidationError("config", f"{path} {not_utf8(error)}") from None
    except OSError as error:
        raise RequestValidationError("config", f"cannot read {path}: {error}") from None
    try:
        data = parse_file_text(text, path)
    except ValueError as error:  # bad JSON, or a key named twice
        raise RequestValidationError("config", f"{path} is not valid JSON: {error}") from None
    except yaml.YAMLError:
        return text  # `MetricScorer.settings` reports it, naming the config
    if not isinstance(data, dict) or not isinstance(data.get("use_case"), str):
        return text
    return yaml.safe_dump(read_use_case(data, path.parent), sort_keys=False, allow_unicode=True)


@dataclass(frozen=True)
class MetricScorer:
    """Scores rows with a metric.

    metric: the metric's name (see RUNNABLE_METRICS).
    config_text: the run config (YAML or JSON): the metric's config keys plus a `sut:` block.
    explain: attach the judge's evidence to every case.
    column_map: metric field name -> column name in the input.
    """

    metric: str
    config_text: str
    explain: bool = False
    column_map: tuple[tuple[str, str], ...] = ()

    @property
    def score_names(self) -> tuple[str, ...]:
        return (self.metric,)

    @property
    def inverted(self) -> bool:
        """Whether the config makes the score an error rate (higher is worse)."""
        return self.settings[0].inverted

    @property
    def score_scales(self) -> dict[str, ScoreScale]:
        """The metric's score range, where its config rescales it (`min`, `max`)."""
        config, _ = self.settings
        scale = ScoreScale(config.min, config.max)
        return {} if scale.is_unit else {self.metric: scale}

    @cached_property
    def settings(self) -> tuple[OODMetricConfig, dict[str, Any]]:
        """The validated config and `sut:` block, parsed once (the adapter is built per call
        of `score`, which closes it)."""
        try:
            data = load_yaml(self.config_text) if self.config_text.strip() else {}
        except yaml.YAMLError as error:
            raise RequestValidationError("config", f"is not valid YAML or JSON: {error}") from None
        config, sut_options = parse_run_config(data, "config")
        if config.use_case is None:
            raise RequestValidationError("use_case", "required in --config: the use-case profile")
        if sut_options is None:
            raise RequestValidationError(
                "sut", "required in --config: the system under test the probes go to (kind, url)"
            )
        return config, sut_options

    def check(self) -> None:
        check_metric_name(self.metric)
        _ = self.settings
        configured_settings()  # a bad ASSAY_LLM_* value fails the run up front, named

    def check_input(self, path: Path) -> None:
        """Fail before the run when the file lacks a required column (naming them all)."""
        columns = input_columns(path)
        mapped = {wanted for wanted, present in self.column_map if present in columns}
        missing = [c for c in REQUIRED_COLUMNS if c not in columns and c not in mapped]
        if missing:
            found = sample_columns(path)  # in file order
            used = {present for _, present in self.column_map}
            flags = suggested_map(found, used, missing, REQUIRED_COLUMNS)
            fix = f"try {' '.join(flags)}" if flags else "rename columns with --map FIELD=COLUMN"
            raise RequestValidationError(
                ", ".join(missing),
                f"required column(s) missing from {path.name} ({self.metric}); columns found: "
                f"{', '.join(found) or 'none'}; {fix}",
            )

    async def before_rows(self) -> None:
        """Ask the system under test one question before any row is scored
        (`metrics.ood.preflight`); raises RequestValidationError when it does not answer."""
        config, sut_options = self.settings
        assert config.use_case is not None  # checked by `settings`
        examples = profile_from_mapping(config.use_case).examples()
        sut = build_sut(sut_options, config)
        try:
            await preflight(sut, examples[0] if examples else "Hello", config)
        finally:
            await sut.aclose()

    def output_columns(self, columns: Sequence[str]) -> list[str]:
        """The input columns output lines carry (see `_line`), under their mapped names."""
        renamed = {present: wanted for wanted, present in self.column_map}
        carried = dict.fromkeys(renamed.get(column, column) for column in columns)
        return [c for c in carried if c not in self._reserved]

    @property
    def _reserved(self) -> set[str]:
        """Keys of an output line that are not carried input columns."""
        return reserved_keys(self.metric)

    async def score(self, rows: Sequence[Row]) -> list[dict[str, Any]]:
        config, sut_options = self.settings
        sut = build_sut(sut_options, config)
        column_map = dict(self.column_map)
        lines: dict[int, dict[str, Any]] = {}
        valid: list[tuple[int, dict[str, Any]]] = []
        for row, fields in rows:
            if isinstance(fields, Exception):
                kept = (
                    apply_column_map(fields.fields, column_map)
                    if isinstance(fields, UnreadableRow)
                    else None
                )
                message = fields.message if isinstance(fields, RequestValidationError) else None
                lines[row] = self.failure_line(row, kept, INVALID_ROW, message or str(fields))
                continue
            fields = apply_column_map(fields, column_map)
            # CSV and Parquet have no JSON null: a missing reply means "ask the live system".
            fields.setdefault("sut_response", None)
            valid.append((row, fields))
        results: list[RowResult | RequestValidationError] = []
        try:
            if valid:
                batch = [fields for _, fields in valid]
                results.extend(await score_rows(batch, config, sut=sut, explain=self.explain))
        except RequestValidationError:
            # One bad row fails the metric's up-front check; score row by row to say which.
            results = [await self._score_one(fields, config, sut) for _, fields in valid]
        finally:
            await sut.aclose()
        for (row, fields), result in zip(valid, results, strict=True):
            lines[row] = self._line(row, fields, result)
        return [lines[row] for row, _ in rows]

    async def _score_one(
        self, fields: dict[str, Any], config: OODMetricConfig, sut: SystemUnderTest
    ) -> RowResult | RequestValidationError:
        try:
            return (await score_rows([fields], config, sut=sut, explain=self.explain))[0]
        except RequestValidationError as error:
            return error

    def _line(
        self, row: int, fields: Mapping[str, Any], result: RowResult | RequestValidationError
    ) -> dict[str, Any]:
        return metric_line(self.metric, row, fields, result)

    def failure_line(
        self, row: int, fields: Mapping[str, Any] | None, kind: str, message: str
    ) -> dict[str, Any]:
        """See `RowScorer.failure_line`: a metric line whose row has an error."""
        return metric_error_line(self.metric, row, fields or {}, "row", kind, message)


def reserved_keys(metric: str) -> set[str]:
    """Keys of `metric`'s output lines that are not carried input columns."""
    return {"row", "id", "error", "usage", "prompt", "sut_response", "context", "input_id", metric}


def metric_line(
    metric: str, row: int, fields: Mapping[str, Any], result: RowResult | RequestValidationError
) -> dict[str, Any]:
    """The output line of one row scored by `metric` (shared by `assay run --metric` and
    `assay ood --out`).

    row: the row's number; fields: the row's columns (carried through, except the metric's own
    inputs); result: the metric's result, or why the row could not be scored.
    """
    if isinstance(result, RequestValidationError):
        field = result.field.split("]", 1)[-1].lstrip(".") or "row"
        return metric_error_line(metric, row, fields, field, INVALID_ROW, result.message)
    line = _carried(metric, row, fields)
    data = result.to_dict()
    # LLM usage goes on the line, as for detectors, where the run summary counts it.
    usage = data.pop("usage")
    if usage:
        line["usage"] = usage
    if result.score is None:
        transport = any(c.status == "transport_error" for c in result.cases)
        line[metric] = {
            "error": True,
            "kind": "transport" if transport else "judge",
            "message": result.error or "not scored",
            "input_id": result.input_id,
            "cases": data["cases"],
            "warnings": data["warnings"],
        }
    else:
        optional = ("score_range", "inverted")  # written only when the config sets them
        line[metric] = {
            k: v for k, v in data.items() if k != "error" and not (k in optional and v is None)
        }
    return line


def _carried(metric: str, row: int, fields: Mapping[str, Any]) -> dict[str, Any]:
    """A line's row number, id (the input_id) and carried columns."""
    line: dict[str, Any] = {"row": row, "id": fields.get("input_id")}
    reserved = reserved_keys(metric)
    line.update({k: v for k, v in fields.items() if k not in reserved})
    return line


def metric_error_line(
    metric: str, row: int, fields: Mapping[str, Any], field: str, kind: str, message: str
) -> dict[str, Any]:
    """The line of a row `metric` could not score: its id and carried columns, and the error."""
    line = _carried(metric, row, fields)
    line["error"] = {"field": field, "kind": kind, "message": message}
    return line
