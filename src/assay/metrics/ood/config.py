"""`OODMetricConfig`: the options of `llm.ood_detection`, shaped exactly like the published schema.

The JSON schema of this model must equal the published `config_schema` (titles, defaults, bounds,
`x-aip-param-role`), so the model carries no docstring-derived description and no
`additionalProperties`; unknown keys are rejected by `parse_config` instead.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.config import JsonDict

from assay.schema import RequestValidationError

_OPERATIONAL: JsonDict = {"x-aip-param-role": "operational"}
_SCORING: JsonDict = {"x-aip-param-role": "scoring_metadata"}


def _without_description(schema: JsonDict) -> None:
    # The class docstring would otherwise become the schema's "description", which the
    # published schema does not have.
    schema.pop("description", None)


class OODMetricConfig(BaseModel):
    model_config = ConfigDict(title="OODMetricConfig", json_schema_extra=_without_description)

    # How many system-under-test calls may be in flight at once, across all rows.
    concurrency_limit: int = Field(default=5, ge=1, le=64, json_schema_extra=_OPERATIONAL)
    # When true, the reported score is flipped inside [min, max] (1 - accuracy, rescaled).
    inverted: bool = Field(default=False, json_schema_extra=_SCORING)
    # Upper end of the reported score range; accuracy 1.0 maps here.
    max: float = Field(default=1.0, json_schema_extra=_SCORING)
    # Name the score is reported under.
    metric_name: str = Field(default="ood_detection", json_schema_extra=_SCORING)
    # Lower end of the reported score range; accuracy 0.0 maps here.
    min: float = Field(default=0.0, json_schema_extra=_SCORING)
    # Extra tries after a failed system-under-test call (with exponential backoff).
    n_sut_retries: int = Field(default=0, ge=0, le=5)
    # Out-of-domain probes built for each row.
    num_ood_queries: int = Field(default=3, ge=1, le=32)
    # Sampling temperature sent to the system under test (OpenAI-compatible adapter).
    sut_temperature: float = Field(default=0.2, ge=0.0, le=2.0)
    # Probe synthesis temperature; 0 makes probe selection deterministic.
    synthesis_temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    # Per-call timeout for the system under test, in seconds.
    timeout_seconds: float = Field(default=60.0, gt=0, json_schema_extra=_OPERATIONAL)
    # The use-case profile (name, description, allowed_topics, examples, ...), all strings.
    use_case: dict[str, str] | None = None
    # Weight of this metric when several metrics are combined; does not change the row score.
    weight: float = Field(default=1.0, json_schema_extra=_SCORING)


def _allowed(field: str) -> str:
    """Human wording of the allowed values of `field`, read from the schema itself."""
    spec = OODMetricConfig.model_json_schema()["properties"].get(field, {})
    articles = {"integer": "an integer", "number": "a number", "boolean": "a boolean"}
    kind = articles.get(
        spec.get("type", ""), spec.get("type", "a string-to-string mapping or null")
    )
    if kind == "string":
        kind = "a string"
    low = spec.get("minimum")
    high = spec.get("maximum")
    if low is not None and high is not None:
        return f"{kind} between {low} and {high}"
    if "exclusiveMinimum" in spec:
        return f"{kind} greater than {spec['exclusiveMinimum']}"
    return str(kind)


def parse_config(values: Mapping[str, Any] | OODMetricConfig | None) -> OODMetricConfig:
    """Validate `values` into an `OODMetricConfig`.

    values: a mapping of config keys (as in a YAML/JSON config file), an existing config, or None
        for all defaults.

    Raises RequestValidationError naming the first bad field and its allowed range or type.
    """
    config = values if isinstance(values, OODMetricConfig) else _validated(dict(values or {}))
    if config.max <= config.min:
        raise RequestValidationError("max", f"must be greater than min ({config.min:g})")
    return config


#: The fields the published schema types as "integer".
_INTEGERS = frozenset(n for n, f in OODMetricConfig.model_fields.items() if f.annotation is int)


def _validated(values: dict[str, Any]) -> OODMetricConfig:
    known = set(OODMetricConfig.model_fields)
    unknown = sorted(set(values) - known)
    if unknown:
        raise RequestValidationError(
            unknown[0], f"unknown config key; allowed keys: {', '.join(sorted(known))}"
        )
    for name, value in values.items():
        # JSON has no infinity or NaN, so the published schema's numbers are finite.
        if isinstance(value, float) and not math.isfinite(value):
            finite = _allowed(name).replace("a number", "a finite number", 1)
            raise RequestValidationError(name, f"must be {finite} (got {value!r})")
    _check_use_case(values.get("use_case"))
    # A whole number written 3.0 is an integer to JSON Schema (from draft 2019-09, which the
    # published schema's pydantic form follows), and Python's json.dumps writes whole floats so.
    values = {
        name: int(value)
        if name in _INTEGERS and isinstance(value, float) and value.is_integer()
        else value
        for name, value in values.items()
    }
    # Strict: the schema's types as they are. "3" is not an integer, "yes" not a boolean, and a
    # bool is not a number (`num_ood_queries: true` must not pass as 1).
    try:
        return OODMetricConfig.model_validate(values, strict=True)
    except ValidationError as error:
        first = error.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "config"
        top = str(first["loc"][0]) if first["loc"] else field
        got = values.get(top)
        raise RequestValidationError(
            field, f"must be {_allowed(top)} (got {got!r}: {first['msg']})"
        ) from None


def _check_use_case(use_case: Any) -> None:
    # Named by key: "use_case.examples: must be a string", not the whole mapping's type.
    if isinstance(use_case, str):
        raise RequestValidationError(
            "use_case",
            f"must be a string-to-string mapping or null (got {use_case!r}); a profile file "
            "path is read only in a run config file (`load_run_config`, `assay run --config`)",
        )
    if not isinstance(use_case, Mapping):
        return
    for key, value in use_case.items():
        if not isinstance(key, str):
            raise RequestValidationError("use_case", f"keys must be strings (got {key!r})")
        if not isinstance(value, str):
            raise RequestValidationError(
                f"use_case.{key}", f"must be a string (got {type(value).__name__} {value!r})"
            )
