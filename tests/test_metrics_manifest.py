"""Manifests: llm.ood_detection's machine-read values and config schema are exactly the
published ones (read from the shared spec folder at test time), and the detectors' manifests
agree with the detector registry."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import Result
from typer.testing import CliRunner

from assay.cli import app
from assay.detectors import DETECTORS
from assay.metrics import all_manifests, get_manifest, render_manifest
from assay.metrics.manifest import ManifestError, parse_manifest
from assay.metrics.ood import OODMetricConfig

SPEC_FILE = "001_cc7ffd926b5e24b5.txt"


def shared_dir() -> Path:
    default = Path(__file__).resolve().parents[1].parent / "shared"
    return Path(os.environ.get("ASSAY_SHARED_DIR", default))


@pytest.fixture(scope="module")
def page() -> str:
    return (shared_dir() / "spec" / SPEC_FILE).read_text(encoding="utf-8")


def json_block(page: str, heading: str) -> Any:
    """The JSON value that follows a heading line of the published page."""
    start = page.index(f"\n{heading}\n") + len(heading) + 2
    value, _ = json.JSONDecoder().raw_decode(page[start:].lstrip())
    return value


def contract(page: str) -> dict[str, str]:
    return dict(re.findall(r"^(\w+) \| (.+?) \|$", page, flags=re.MULTILINE))


def test_config_schema_equals_the_published_one(page: str) -> None:
    published = json_block(page, "Configuration schema")
    assert OODMetricConfig.model_json_schema() == published
    assert get_manifest("llm.ood_detection").config_schema == published


def test_machine_read_fields_equal_the_published_ones(page: str) -> None:
    manifest = get_manifest("llm.ood_detection")
    table = contract(page)
    assert manifest.version == table["version"]
    assert manifest.metric_type == table["metric_type"]
    assert manifest.scorer_contract == table["scorer_contract"]
    assert manifest.direction == table["direction"]
    assert manifest.entrypoint == table["entrypoint"]
    assert manifest.target_kind is None and table["target_kind"] == "None"
    assert [a.model_dump() for a in manifest.accepts] == json_block(page, "Accepted schemas")
    assert manifest.execution.model_dump() == json_block(page, "Execution")
    columns = page.split("\nRequired columns\n", 1)[1].split("\n", 1)[0]
    assert "".join(manifest.required_columns) == columns
    assert manifest.name == "llm.ood_detection" and manifest.kind == "metric"
    assert manifest.display_name == page.splitlines()[0]
    complete = page.split("\nComplete manifest\n", 1)[1]
    for key in ("manifest_version: '1'", "max_prompt_slots: 0", "dependencies: []"):
        assert key in complete
    document = render_manifest(manifest, "yaml")
    assert "manifest_version: '1'" in document and "max_prompt_slots: 0" in document


def test_every_detector_has_a_manifest_that_matches_the_registry() -> None:
    manifests = all_manifests()
    for name, detector in DETECTORS.items():
        manifest = manifests[name]
        assert manifest.kind == "detector"
        assert manifest.required_columns == list(detector.required_inputs)
        assert manifest.description == detector.description


def test_manifests_round_trip_through_yaml_and_json() -> None:
    manifest = get_manifest("llm.ood_detection")
    assert parse_manifest(render_manifest(manifest, "yaml")) == manifest
    assert parse_manifest(render_manifest(manifest, "json")) == manifest


def test_a_broken_manifest_names_the_bad_field() -> None:
    data = yaml.safe_load(render_manifest(get_manifest("output_relevance")))
    data["execution"]["processing_kind"] = "quantum"
    with pytest.raises(ManifestError, match=r"x\.yaml: execution\.processing_kind"):
        parse_manifest(yaml.safe_dump(data), "x.yaml")


def test_unknown_metric_lists_the_known_ones() -> None:
    with pytest.raises(KeyError, match="known: llm.ood_detection, completeness, output_relevance"):
        get_manifest("llm.nope")


def assay(*args: str) -> Result:
    """Run the real `assay` app in-process and capture its output."""
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})


def test_cli_lists_and_shows_manifests(page: str) -> None:
    listed = assay("metrics", "list", "--json")
    assert listed.exit_code == 0, listed.stderr
    assert [m["name"] for m in json.loads(listed.stdout)] == [
        "llm.ood_detection",
        "completeness",
        "output_relevance",
    ]
    table = assay("metrics", "list")
    assert table.exit_code == 0 and "llm.ood_detection" in table.stdout
    shown = assay("metrics", "show", "llm.ood_detection", "--format", "json")
    assert json.loads(shown.stdout)["config_schema"] == json_block(page, "Configuration schema")
    as_yaml = assay("metrics", "show", "llm.ood_detection")
    assert yaml.safe_load(as_yaml.stdout)["execution"]["timeout_seconds"] == 21600


def test_cli_rejects_bad_names_and_formats_in_one_line() -> None:
    unknown = assay("metrics", "show", "nope")
    assert unknown.exit_code == 2
    assert unknown.stderr.strip().startswith("error: unknown metric 'nope'")
    assert "Traceback" not in unknown.stderr and len(unknown.stderr.strip().splitlines()) == 1
    bad = assay("metrics", "show", "completeness", "--format", "xml")
    assert bad.exit_code == 2 and "--format: must be yaml or json" in bad.stderr


@pytest.mark.parametrize("detector", ["output_relevance", "completeness"])
def test_a_detectors_config_schema_is_the_one_requests_are_checked_against(detector: str) -> None:
    # The manifests said explain defaults to false, had no judge option and took unknown
    # options, while the API defaults explain to true and refuses unknown options.
    from assay.schema import DetectorConfig

    assert get_manifest(detector).config_schema == DetectorConfig.model_json_schema()
