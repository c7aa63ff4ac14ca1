"""CI gates: parsing and checking --fail-under, and JUnit XML with one test case per row."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from assay.runner.gates import (
    check_fail_under,
    describe_result,
    junit_case,
    parse_fail_under,
    write_junit,
)
from assay.schema import RequestValidationError
from published_instructions import OUTPUT_RELEVANCE


def relevance(*probabilities: float, explanation: str = "because") -> dict[str, Any]:
    """An output_relevance result with these follow probabilities, in rubric order."""
    entries = [
        {
            "explanation": explanation,
            "follow_probability": p,
            "instruction": text,
            "label": p >= 0.5,
        }
        for text, p in zip(OUTPUT_RELEVANCE, probabilities, strict=True)
    ]
    return {"instructions_list": entries, "score": sum(e["label"] for e in entries) / len(entries)}


def test_fail_under_specs_parse_to_thresholds() -> None:
    thresholds = parse_fail_under(["output_relevance=0.7", " completeness = 0.55 ", "x=1"])

    assert thresholds == {"output_relevance": 0.7, "completeness": 0.55, "x": 1.0}
    assert parse_fail_under([]) == {}


@pytest.mark.parametrize(
    ("spec", "complaint"),
    [
        ("output_relevance", "is not NAME=THRESHOLD"),
        ("=0.7", "is not NAME=THRESHOLD"),
        ("output_relevance=", "is not NAME=THRESHOLD"),
        ("output_relevance=high", "threshold 'high' is not a number"),
        ("output_relevance=70", "outside 0 to 1"),
        ("output_relevance=-0.1", "outside 0 to 1"),
        ("output_relevance=nan", "outside 0 to 1"),
    ],
)
def test_a_bad_fail_under_spec_names_the_flag_and_the_spec(spec: str, complaint: str) -> None:
    with pytest.raises(RequestValidationError) as caught:
        parse_fail_under(["completeness=0.5", spec])

    assert caught.value.field == "--fail-under"
    assert repr(spec) in caught.value.message
    assert complaint in caught.value.message


def test_fail_under_rejects_repeats_and_names_outside_the_known_list() -> None:
    with pytest.raises(RequestValidationError, match="'completeness' is given twice"):
        parse_fail_under(["completeness=0.5", "completeness=0.6"])
    with pytest.raises(RequestValidationError) as caught:
        parse_fail_under(["relevance=0.5"], known=["output_relevance", "completeness"])
    assert "unknown detector or metric 'relevance'" in caught.value.message
    assert "known: completeness, output_relevance" in caught.value.message


def test_check_fail_under_fails_below_passes_at_and_above_the_threshold() -> None:
    means = {"output_relevance": 0.65, "completeness": 0.7, "llm.ood_detection": 0.9}

    messages = check_fail_under(
        means, {"output_relevance": 0.7, "completeness": 0.7, "llm.ood_detection": 0.8}
    )

    assert messages == ["output_relevance: mean score 0.6500 is below --fail-under threshold 0.7"]
    # A mean that equals the threshold up to float rounding passes.
    float_mean = (1.0 + 0.4 + 0.7) / 3
    assert float_mean < 0.7
    assert check_fail_under({"completeness": float_mean}, {"completeness": 0.7}) == []


def test_gating_a_name_the_run_never_scored_fails_and_says_what_it_has() -> None:
    messages = check_fail_under(
        {"output_relevance": 0.9, "completeness": None},
        {"relevance": 0.5, "completeness": 0.5},
    )

    assert len(messages) == 2
    assert "no 'relevance' results (it has: output_relevance, completeness)" in messages[0]
    assert "every row's completeness errored" in messages[1]


def test_describe_result_marks_each_instruction_with_probability_and_explanation() -> None:
    text = describe_result("output_relevance", relevance(0.9, 0.2, 0.8, 0.3), threshold=0.7)

    lines = text.splitlines()
    assert lines[0] == "output_relevance: score 0.5 (below threshold 0.7)"
    assert lines[1] == f"  ✓ {OUTPUT_RELEVANCE[0]} (p=0.9000)"
    assert lines[3] == f"  ✗ {OUTPUT_RELEVANCE[1]} (p=0.2000)"
    assert lines[4] == "      because"
    error = {"error": True, "kind": "timeout", "message": "judge took too long"}
    assert describe_result("completeness", error) == (
        "completeness: error (timeout): judge took too long"
    )


def sample_lines() -> Iterator[dict[str, Any]]:
    """Four output lines: passing, below threshold, a detector error, a rejected row."""
    yield {"row": 1, "id": "q-1", "output_relevance": relevance(0.9, 0.9, 0.9, 0.9)}
    yield {
        "row": 2,
        "id": "q-2",
        "output_relevance": relevance(0.1, 0.2, 0.9, 0.4, explanation="off topic\x07 <tag> & co"),
        "llm.ood_detection": {"score": 0.95},
    }
    yield {
        "row": 3,
        "output_relevance": relevance(0.9, 0.9, 0.9, 0.6),
        "completeness": {"error": True, "kind": "timeout", "message": "no answer in 30s"},
    }
    yield {
        "row": 4,
        "id": "q-4",
        "error": {"field": "generated_text", "message": "must not be empty"},
    }


def test_junit_has_one_case_per_row_failed_below_threshold_and_errored_on_errors(
    tmp_path: Path,
) -> None:
    path = tmp_path / "ci" / "assay.xml"

    counts = write_junit(sample_lines(), path, {"output_relevance": 0.7}, suite_name="assay.rag")

    assert (counts.tests, counts.failures, counts.errors) == (4, 1, 2)
    suite = ET.parse(path).getroot()
    assert suite.tag == "testsuite"
    assert suite.attrib == {"name": "assay.rag", "tests": "4", "failures": "1", "errors": "2"}
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == ["q-1", "q-2", "row 3", "q-4"]
    assert {c.get("classname") for c in cases} == {"assay.rag"}

    passed, below, errored, rejected = cases
    assert passed.find("failure") is None and passed.find("error") is None
    assert "output_relevance: score 1 (meets threshold 0.7)" in (
        passed.findtext("system-out") or ""
    )

    failure = below.find("failure")
    assert failure is not None
    assert failure.get("type") == "below_threshold"
    assert failure.get("message") == "output_relevance 0.25 < 0.7"
    body = failure.text or ""
    assert f"✗ {OUTPUT_RELEVANCE[0]} (p=0.1000)" in body
    assert "off topic <tag> & co" in body  # escaped on the way in, the control character dropped
    assert "llm.ood_detection: score 0.95" in body  # ungated scorers are listed, not judged

    error = errored.find("error")
    assert error is not None
    assert error.get("type") == "timeout"
    assert error.get("message") == "completeness: no answer in 30s"

    invalid = rejected.find("error")
    assert invalid is not None
    assert invalid.get("type") == "invalid_row"
    assert invalid.get("message") == "generated_text: must not be empty"
    assert not list(tmp_path.glob("ci/*.partial"))


def test_without_thresholds_only_errored_rows_fail(tmp_path: Path) -> None:
    counts = write_junit(sample_lines(), tmp_path / "out.xml", {})

    assert (counts.tests, counts.failures, counts.errors) == (4, 0, 2)


def test_a_score_equal_to_its_threshold_passes() -> None:
    line = {"row": 1, "output_relevance": relevance(0.9, 0.9, 0.9, 0.1)}

    assert junit_case(line, {"output_relevance": 0.75}).find("failure") is None
    assert junit_case(line, {"output_relevance": 0.76}).find("failure") is not None


def test_an_empty_output_still_gives_a_valid_empty_suite(tmp_path: Path) -> None:
    path = tmp_path / "empty.xml"

    write_junit(iter(()), path, {"output_relevance": 0.5})

    suite = ET.parse(path).getroot()
    assert suite.get("tests") == "0"
    assert suite.findall("testcase") == []
