"""CI gates: parsing and checking --fail-under (rows a scorer could not score count against it),
and JUnit XML with a test case per row and per gate that agrees with the exit code."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from assay.report.collect import collect
from assay.runner.gates import (
    GateCase,
    GateFigures,
    check_fail_under,
    describe_result,
    fail_under_gates,
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
        ("output_relevance=nan", "is not finite"),
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
    assert "'relevance' is not among the scorers here (completeness, output_relevance)" in (
        caught.value.message
    )


def test_fail_under_takes_one_value_as_a_string() -> None:
    # It was read as a list of its characters: "'o' is not NAME=THRESHOLD".
    assert parse_fail_under("output_relevance=0.5") == {"output_relevance": 0.5}


def test_collect_says_it_takes_parsed_lines() -> None:
    from assay.report.collect import collect

    with pytest.raises(TypeError, match="iter_output_lines"):
        collect(['{"row": 1}'])  # type: ignore[list-item]


def scored(mean: float | None, rows: int = 10, unscored: int = 0) -> GateFigures:
    """Gate figures for `rows` scored rows with this mean and `unscored` rows it missed."""
    return GateFigures((mean or 0.0) * rows, rows if mean is not None else 0, unscored)


def test_check_fail_under_fails_below_passes_at_and_above_the_threshold() -> None:
    figures = {
        "output_relevance": scored(0.65),
        "completeness": scored(0.7),
        "llm.ood_detection": scored(0.9),
    }

    messages = check_fail_under(
        figures, {"output_relevance": 0.7, "completeness": 0.7, "llm.ood_detection": 0.8}
    )

    assert messages == ["output_relevance: mean score 0.6500 is below --fail-under threshold 0.7"]
    # A mean that equals the threshold up to float rounding passes.
    float_total = 1.0 + 0.4 + 0.7
    assert float_total / 3 < 0.7
    assert (
        check_fail_under({"completeness": GateFigures(float_total, 3)}, {"completeness": 0.7}) == []
    )


def test_rows_a_scorer_could_not_score_count_against_its_gate() -> None:
    # 8 rows scored 0.8 on average, 2 it could not score: as a gate, 6.4 / 10 = 0.64.
    figures = {"output_relevance": scored(0.8, rows=8, unscored=2)}

    [message] = check_fail_under(figures, {"output_relevance": 0.7})
    passes = check_fail_under(figures, {"output_relevance": 0.6})

    assert message == (
        "output_relevance: mean score 0.8000 over 8 scored rows is 0.6400 counting the 2 rows "
        "it could not score as failures, below --fail-under threshold 0.7"
    )
    assert passes == []
    assert figures["output_relevance"].mean == pytest.approx(0.8)  # the shown mean is unchanged


def test_rows_without_a_scorers_inputs_count_against_its_gate() -> None:
    # A run naming no detectors scores each row with those its fields allow: rows without a
    # user_query get completeness alone, and the relevance gate must not pass on the rest.
    from assay.report.collect import RunTally
    from assay.runner.summary import RunSummary

    def result(score: float) -> dict[str, Any]:
        return {"score": score, "instructions_list": []}

    lines = [
        {"row": n, "completeness": result(1.0)}
        | ({"output_relevance": result(1.0)} if n % 2 else {})
        for n in range(1, 11)
    ]
    summary, tally = RunSummary(), RunTally()
    for line in lines:
        summary.add_line(line)
        tally.add_line(line)
    for figures in (summary.gate_figures(), tally.gate_figures()):
        relevance = figures["output_relevance"]
        assert (relevance.rows_scored, relevance.rows_unscored) == (5, 5)
        assert check_fail_under(figures, {"output_relevance": 0.7})
        assert check_fail_under(figures, {"completeness": 0.7}) == []


def test_gating_a_name_the_run_never_scored_fails_and_says_what_it_has() -> None:
    messages = check_fail_under(
        {"output_relevance": scored(0.9), "completeness": scored(None, unscored=4)},
        {"relevance": 0.5, "completeness": 0.5},
    )

    assert len(messages) == 2
    assert "no 'relevance' results (it has: output_relevance, completeness)" in messages[0]
    assert "every row's completeness errored" in messages[1]


def test_each_gate_is_a_case_named_after_its_flag() -> None:
    gates = fail_under_gates(
        {"output_relevance": scored(0.5), "completeness": scored(0.9)},
        {"output_relevance": 0.7, "completeness": 0.7},
    )

    assert [g.name for g in gates] == [
        "--fail-under output_relevance=0.7",
        "--fail-under completeness=0.7",
    ]
    assert gates[0].failure is not None and gates[1].failure is None


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


def test_junit_has_a_case_per_row_and_per_gate_errored_on_errors(tmp_path: Path) -> None:
    path = tmp_path / "ci" / "assay.xml"
    gate = GateCase("--fail-under output_relevance=0.7", "output_relevance: mean 0.5 is below")

    counts = write_junit(
        sample_lines(), path, {"output_relevance": 0.7}, suite_name="assay.rag", gates=[gate]
    )

    assert (counts.tests, counts.failures, counts.errors, counts.skipped) == (5, 1, 2, 0)
    suite = ET.parse(path).getroot()
    assert suite.tag == "testsuite"
    assert suite.attrib == {
        "name": "assay.rag",
        "tests": "5",
        "failures": "1",
        "errors": "2",
        "skipped": "0",
    }
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == [
        "q-1",
        "q-2",
        "row 3",
        "q-4",
        "--fail-under output_relevance=0.7",
    ]
    assert [c.get("classname") for c in cases] == ["assay.rag"] * 4 + ["assay.rag.gates"]

    passed, below, errored, rejected, gate_case = cases
    assert passed.find("failure") is None and passed.find("error") is None
    assert "output_relevance: score 1 (meets threshold 0.7)" in (
        passed.findtext("system-out") or ""
    )

    # A row below the threshold says so, but only the gate (on the mean) fails.
    assert below.find("failure") is None
    body = below.findtext("system-out") or ""
    assert "output_relevance: score 0.25 (below threshold 0.7)" in body
    assert f"✗ {OUTPUT_RELEVANCE[0]} (p=0.1000)" in body
    assert "off topic <tag> & co" in body  # escaped on the way in, the control character dropped
    assert "llm.ood_detection: score 0.95" in body  # ungated scorers are listed, not judged
    failure = gate_case.find("failure")
    assert failure is not None and failure.get("message") == gate.failure

    error = errored.find("error")
    assert error is not None
    assert error.get("type") == "timeout"
    assert error.get("message") == "completeness: no answer in 30s"

    invalid = rejected.find("error")
    assert invalid is not None
    assert invalid.get("type") == "invalid_row"
    assert invalid.get("message") == "generated_text: must not be empty"
    assert not list(tmp_path.glob("ci/*.partial"))


def test_a_repeated_id_names_its_row_so_ci_tools_keep_both_cases(tmp_path: Path) -> None:
    lines = [
        {"row": n, "id": row_id, "output_relevance": relevance(0.9, 0.9, 0.9, 0.9)}
        for n, row_id in enumerate(["t-1", "t-6", "t-6", "t-2", "t-6"], start=1)
    ]
    path = tmp_path / "assay.xml"
    write_junit(lines, path, {})
    names = [case.get("name") for case in ET.parse(path).getroot().iter("testcase")]
    assert names == ["t-1", "t-6", "t-6 (row 3)", "t-2", "t-6 (row 5)"]


def test_allowed_errors_are_skipped_cases_not_errors(tmp_path: Path) -> None:
    path = tmp_path / "out.xml"

    counts = write_junit(sample_lines(), path, {}, allow_errors=True)

    assert (counts.tests, counts.failures, counts.errors, counts.skipped) == (4, 0, 0, 2)
    skipped = [c for c in ET.parse(path).getroot() if c.find("skipped") is not None]
    assert [c.get("name") for c in skipped] == ["row 3", "q-4"]
    assert skipped[0].find("skipped").get("message") == "timeout: completeness: no answer in 30s"  # type: ignore[union-attr]


def test_without_gates_only_errored_rows_are_problems(tmp_path: Path) -> None:
    counts = write_junit(sample_lines(), tmp_path / "out.xml", {"output_relevance": 0.9})

    assert (counts.tests, counts.failures, counts.errors) == (4, 0, 2)


def test_a_row_is_never_a_failure_on_its_own() -> None:
    line = {"row": 1, "output_relevance": relevance(0.9, 0.9, 0.9, 0.1)}

    assert junit_case(line, {"output_relevance": 0.75}).find("failure") is None
    assert "meets threshold 0.75" in (
        junit_case(line, {"output_relevance": 0.75}).findtext("system-out") or ""
    )
    assert "below threshold 0.76" in (
        junit_case(line, {"output_relevance": 0.76}).findtext("system-out") or ""
    )


def test_an_empty_output_still_gives_a_valid_empty_suite(tmp_path: Path) -> None:
    path = tmp_path / "empty.xml"

    write_junit(iter(()), path, {"output_relevance": 0.5})

    suite = ET.parse(path).getroot()
    assert suite.get("tests") == "0"
    assert suite.findall("testcase") == []


def test_an_unscored_row_counts_as_the_lowest_score_of_a_rescaled_metric() -> None:
    # On a -1..1 scale an unscored row counted as 0, half way up: half the rows failing
    # passed a gate of 0.2. It counts as the scale's bottom, as 0 is on 0..1.
    scored = {
        "row": 1,
        "llm.ood_detection": {"score": 1.0, "cases": [], "score_range": [-1.0, 1.0]},
    }
    errored = {
        "row": 2,
        "llm.ood_detection": {"error": True, "kind": "transport", "message": "SUT down"},
    }
    figures = collect([scored, errored]).gate_figures()
    assert figures["llm.ood_detection"].gated_mean == 0.0
    [failure] = check_fail_under(figures, {"llm.ood_detection": 0.2})
    assert "is 0.0000 counting the 1 row it could not score as failures (-1 each)" in failure
    assert GateFigures(1.0, 1, 1).gated_mean == 0.5  # on 0..1, as before


def test_a_junit_case_names_an_id_that_is_not_text_as_json() -> None:
    # A Parquet struct id was named by Python's repr, "{'a': 1}".
    line = {"row": 3, "id": {"b": 2, "a": 1}, "output_relevance": relevance(0.9, 0.9, 0.9, 0.9)}
    assert junit_case(line, {}).get("name") == '{"a": 1, "b": 2}'
    assert junit_case({**line, "id": 7}, {}).get("name") == "7"
    assert junit_case({**line, "id": "t-6"}, {}).get("name") == "t-6"
