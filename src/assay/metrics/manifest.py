"""Manifests: the machine-readable description of every Assay detector and metric.

A manifest says what a scorer is called, which columns it needs, which dataset schemas it accepts,
how it may be executed, and the JSON schema of its config. Manifests are YAML files in
`assay/metrics/manifests/`, one per detector or metric, read on demand (never at import time).
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError


class AcceptedSchema(BaseModel):
    """A dataset schema the scorer reads.

    name: the schema's id, e.g. "gdi_text_v1".
    task_types: the task shapes of that schema the scorer supports.
    """

    model_config = ConfigDict(extra="forbid")

    name: str
    task_types: list[str]


class Execution(BaseModel):
    """How a runner may execute the scorer.

    emits_metric_family: whether one call yields several named metrics.
    function_name: the callable inside the entrypoint module, when not the default.
    max_concurrency: most rows scored at once.
    processing_kind: what bounds the work ("network" calls out, "cpu" computes locally).
    stream_batch_size: rows read per streaming batch.
    timeout_seconds: budget for a whole run.
    """

    model_config = ConfigDict(extra="forbid")

    emits_metric_family: bool = False
    function_name: str | None = None
    max_concurrency: int = Field(ge=1)
    processing_kind: Literal["network", "cpu"]
    stream_batch_size: int = Field(ge=1)
    timeout_seconds: int = Field(gt=0)


class MetricMetadata(BaseModel):
    """Prose for people: what is measured, how, what the score means, one worked example."""

    model_config = ConfigDict(extra="forbid")

    methodology: list[str]
    score_semantics: str
    summary: str
    worked_example: str


class Manifest(BaseModel):
    """One detector's or metric's manifest (field names as in the published manifest format)."""

    model_config = ConfigDict(extra="forbid")

    accepts: list[AcceptedSchema]
    config_schema: dict[str, Any]
    dependencies: list[str] = Field(default_factory=list)
    description: str
    direction: Literal["higher_is_better", "lower_is_better"]
    display_name: str
    entrypoint: str
    execution: Execution
    kind: Literal["metric", "detector"]
    manifest_version: str
    max_prompt_slots: int = Field(default=0, ge=0)
    metric_metadata: MetricMetadata
    metric_type: Literal["pointwise", "pairwise", "corpus"]
    name: str
    partition_types: list[str] = Field(default_factory=list)
    required_columns: list[str]
    required_kinds: list[str] = Field(default_factory=list)
    scorer_contract: Literal["per_row", "per_batch", "per_corpus"]
    target_kind: str | None = None
    unsupported_trace_shapes: list[str] = Field(default_factory=list)
    version: str


class ManifestError(ValueError):
    """A manifest file is missing, unreadable or does not match the manifest model."""


_FOLDER = "manifests"


def _manifest_files() -> dict[str, str]:
    """Manifest file name stem -> file text, for every bundled manifest."""
    folder = resources.files("assay.metrics").joinpath(_FOLDER)
    return {
        entry.name.removesuffix(".yaml"): entry.read_text(encoding="utf-8")
        for entry in folder.iterdir()
        if entry.name.endswith(".yaml")
    }


def parse_manifest(text: str, source: str = "<text>") -> Manifest:
    """Parse and validate one manifest.

    text: the manifest as YAML (JSON is valid YAML too).
    source: where it came from, for error messages.
    """
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ManifestError(f"{source}: not valid YAML: {error}") from None
    try:
        return Manifest.model_validate(data)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise ManifestError(f"{source}: {where}: {first['msg']}") from None


@cache
def all_manifests() -> dict[str, Manifest]:
    """Every bundled manifest by name, metrics first, then detectors, each sorted by name."""
    manifests = [parse_manifest(text, f"{stem}.yaml") for stem, text in _manifest_files().items()]
    manifests.sort(key=lambda m: (m.kind != "metric", m.name))
    return {manifest.name: manifest for manifest in manifests}


def get_manifest(name: str) -> Manifest:
    """The manifest called `name`; KeyError listing the known names otherwise."""
    manifests = all_manifests()
    if name not in manifests:
        raise KeyError(f"unknown metric {name!r}; known: {', '.join(manifests)}")
    return manifests[name]


def manifest_document(manifest: Manifest) -> dict[str, Any]:
    """The manifest as plain data, keys in alphabetical order as in the published form."""
    data = manifest.model_dump(mode="json")
    return dict(sorted(data.items()))


def render_manifest(manifest: Manifest, fmt: Literal["yaml", "json"] = "yaml") -> str:
    """The manifest as YAML or JSON text.

    fmt: "yaml" (block style, keys sorted) or "json" (indented).
    """
    import json

    document = manifest_document(manifest)
    if fmt == "json":
        return json.dumps(document, indent=2, ensure_ascii=False)
    return yaml.safe_dump(document, sort_keys=True, allow_unicode=True, width=100)
