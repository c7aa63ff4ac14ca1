"""The wire contract: byte-exact instructions, label and score rules, shapes, failures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from assay.detectors import DETECTORS
from assay.detectors.evaluate import build_result, detect_items, parse_items
from assay.judges import Verdict
from assay.schema import DetectorFailed, JudgeFailure
from published_instructions import COMPLETENESS, OUTPUT_RELEVANCE

SPEC = Path(__file__).resolve().parents[2] / "shared" / "spec"


def test_instruction_texts_are_byte_exact() -> None:
    assert [i.text for i in DETECTORS["output_relevance"].instructions] == OUTPUT_RELEVANCE
    assert [i.text for i in DETECTORS["completeness"].instructions] == COMPLETENESS
    assert all(text.endswith(".") for text in OUTPUT_RELEVANCE)
    assert not any(text.endswith(".") for text in COMPLETENESS)


@pytest.mark.parametrize(
    ("detector", "spec_file"),
    [
        ("output_relevance", "000_075ea2da24fc593e.txt"),
        ("completeness", "002_84abcc82b884d01e.txt"),
    ],
)
def test_instruction_texts_appear_verbatim_in_the_published_page(
    detector: str, spec_file: str
) -> None:
    page = SPEC / spec_file
    if not page.exists():
        pytest.skip(f"published page not found at {page}")
    text = page.read_text(encoding="utf-8")
    for instruction in DETECTORS[detector].instructions:
        assert f'"instruction": "{instruction.text}"' in text


def verdicts(*probabilities: float) -> list[Verdict | JudgeFailure]:
    return [Verdict(p, explanation=f"p={p}") for p in probabilities]


def test_score_is_the_fraction_of_followed_instructions() -> None:
    relevance = build_result(DETECTORS["output_relevance"], verdicts(0.98, 0.97, 0.99, 0.99), True)
    assert relevance.model_dump()["score"] == 1
    completeness = build_result(
        DETECTORS["completeness"], verdicts(0.9, 0.8, 0.2, 0.7, 0.1, 0.6, 0.3, 0.95), True
    )
    assert completeness.model_dump()["score"] == 0.625


def test_label_follows_the_rounded_probability() -> None:
    result = build_result(
        DETECTORS["output_relevance"], verdicts(0.49996, 0.4999, 0.5, 0.123456789), True
    )
    entries = result.model_dump()["instructions_list"]
    assert [e["follow_probability"] for e in entries] == [0.5, 0.4999, 0.5, 0.1235]
    assert [e["label"] for e in entries] == [True, False, True, False]


def test_explanation_is_empty_unless_asked() -> None:
    quiet = build_result(DETECTORS["output_relevance"], verdicts(0.9, 0.9, 0.9, 0.9), False)
    assert all(e["explanation"] == "" for e in quiet.model_dump()["instructions_list"])
    loud = build_result(DETECTORS["output_relevance"], verdicts(0.9, 0.9, 0.9, 0.9), True)
    assert all(e["explanation"] for e in loud.model_dump()["instructions_list"])


async def test_response_shape_is_the_published_one(no_server_env: None) -> None:
    items = parse_items(
        [
            {
                "user_query": "What is your return policy?",
                "generated_text": "Returns are accepted within 30 days of purchase.",
                "context": "Items may be returned within 30 days of purchase.",
                "config": {
                    "output_relevance": {"detector_name": "default", "explain": True},
                    "completeness": {},
                },
            }
        ]
    )
    [response] = await detect_items(items)
    assert set(response) == {"output_relevance", "completeness"}
    for name, result in response.items():
        assert set(result) == {"instructions_list", "score"}
        assert len(result["instructions_list"]) == len(DETECTORS[name].instructions)
    json.dumps(response)  # plain JSON types only


async def test_a_failing_judge_is_an_error_never_a_score(failing_judge: str) -> None:
    body = {"user_query": "q?", "generated_text": "an answer", "config": {"output_relevance": {}}}
    with pytest.raises(DetectorFailed) as raised:
        await detect_items(parse_items([body]), judge=failing_judge)
    assert raised.value.detector == "output_relevance"
    tolerant = parse_items([{**body, "must_compute": "ignore_failures"}])
    [response] = await detect_items(tolerant, judge=failing_judge)
    assert response["output_relevance"] == {
        "error": True,
        "kind": "timeout",
        "message": "test judge always times out",
    }


async def test_ignore_failures_keeps_the_detectors_that_worked(
    failing_judge: str, no_server_env: None
) -> None:
    items = parse_items(
        [
            {
                "user_query": "What is your return policy?",
                "generated_text": "Returns are accepted within 30 days.",
                "context": ["Returns are accepted within 30 days."],
                "config": {"output_relevance": {"judge": failing_judge}, "completeness": {}},
                "must_compute": "ignore_failures",
            }
        ]
    )
    [response] = await detect_items(items)
    assert response["output_relevance"]["error"] is True
    assert 0.0 <= response["completeness"]["score"] <= 1.0
