"""The embedded judge's verdicts: published examples, labels that agree with their explanations,
no instruction that answers a constant, and damage that each instruction must notice.

The published pages and the dev data are read from the shared folder at test time
(`ASSAY_SHARED_DIR`, default `<repo>/../shared`), never copied here.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import statistics
from pathlib import Path
from typing import Any

import pytest

from assay.detectors import DETECTORS
from assay.detectors.evaluate import detect_items, parse_items

COMPLETENESS_PAGE = "002_84abcc82b884d01e.txt"
#: Words by which an explanation reports a problem (a conflict, a gap, an off-topic sentence...).
PROBLEM = re.compile(
    r"\b(?:contradict\w*|conflict\w*|missing|misrepresents?|unanswered|only|not address|"
    r"does not|unrelated|tangential|less relevant|different question|not support\w*|"
    r"hard to follow|repeats|without explanation|loosely)\b",
    re.I,
)


#: A quoted sentence inside an explanation (an apostrophe within a word does not end it).
QUOTE = re.compile(r"'(?:[^']|'(?=\w))*'")


def reports_problem(explanation: str) -> bool:
    """Whether an explanation reports a problem in its own words (quotes are evidence, and may
    say anything)."""
    return PROBLEM.search(QUOTE.sub("''", explanation)) is not None


def shared_dir() -> Path:
    default = Path(__file__).resolve().parents[1].parent / "shared"
    return Path(os.environ.get("ASSAY_SHARED_DIR", default))


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]


async def detect(body: list[dict[str, Any]]) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    for start in range(0, len(body), 32):
        results += await detect_items(parse_items(body[start : start + 32]), judge="embedded")
    return results


def published_completeness_example() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The request and response JSON of the published completeness page."""
    path = shared_dir() / "spec" / COMPLETENESS_PAGE
    if not path.is_file():
        pytest.skip(f"published completeness page not found at {path}; set ASSAY_SHARED_DIR")
    page = path.read_text("utf-8")
    decoder = json.JSONDecoder()
    request_at = page.index("[", page.index("Request"))
    request, _ = decoder.raw_decode(page[request_at:])
    response_at = page.index("[", page.index("Response", page.index("Request")))
    response, _ = decoder.raw_decode(page[response_at:])
    return request, response


async def test_published_completeness_example_agrees_with_at_least_7_of_8_labels() -> None:
    request, response = published_completeness_example()
    assert "explain" not in json.dumps(request)  # the page asks for no explanations...
    [result] = await detect(request)
    ours = result["completeness"]["instructions_list"]
    theirs = response[0]["completeness"]["instructions_list"]
    assert [e["instruction"] for e in ours] == [e["instruction"] for e in theirs]
    agree = sum(a["label"] == b["label"] for a, b in zip(ours, theirs, strict=True))
    assert agree >= 7, [
        (a["instruction"][:40], a["label"], b["label"]) for a, b in zip(ours, theirs, strict=True)
    ]
    assert all(e["explanation"] for e in ours)  # ...and gets them, as the published response does


def test_quotes_do_not_count_as_reported_problems() -> None:
    assert not reports_problem("Led by 'Not only does it cook, it's not missing much'; fine.")
    assert reports_problem("Only 20% of its sentences bear on the question: 'Yes.'")


async def test_explain_false_leaves_explanations_empty() -> None:
    request, _ = published_completeness_example()
    request[0]["config"]["completeness"]["explain"] = False
    [result] = await detect(request)
    assert all(e["explanation"] == "" for e in result["completeness"]["instructions_list"])


async def test_an_answer_about_something_else_scores_zero_relevance() -> None:
    [result] = await detect(
        [
            {
                "user_query": "Explain the role of mitochondria in cells.",
                "generated_text": "The Eiffel Tower is one of the most visited monuments in the world.",
                "config": {"output_relevance": {}},
            }
        ]
    )
    assert result["output_relevance"]["score"] == 0.0


def _rows_by_note() -> dict[str, list[dict[str, Any]]]:
    rows = read_jsonl(Path(__file__).resolve().parents[1] / "examples" / "rag_rows.jsonl")
    by_note: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_note.setdefault(row["note"], []).append(row)
    return by_note


def _item(row: dict[str, Any]) -> dict[str, Any]:
    fields = ("user_query", "context", "generated_text")
    return {**{f: row[f] for f in fields}, "config": {"output_relevance": {}, "completeness": {}}}


def _label(result: dict[str, Any], detector: str, check: str) -> bool:
    index = [i.check for i in DETECTORS[detector].instructions].index(check)
    return bool(result[detector]["instructions_list"][index]["label"])


async def test_example_rows_get_the_verdicts_their_notes_call_for() -> None:
    by_note = _rows_by_note()
    results = {note: await detect([_item(r) for r in rows]) for note, rows in by_note.items()}
    # At least one contradiction is caught as such (the embedded judge misses some paraphrased
    # ones: see the context_contradiction row of the sanity table in bench/RESULTS.md).
    assert any(
        not _label(r, "completeness", check)
        for r in results["contradicts_context"]
        for check in ("faithful_interpretation", "no_contradiction")
    )
    for result in results["off_topic"]:
        assert result["output_relevance"]["score"] == 0.0
    # Every incomplete answer is told it omits something; key_information, the weakest check
    # (see the calibration table in bench/RESULTS.md), catches most of them.
    for result in results["incomplete"]:
        assert not _label(result, "completeness", "no_omissions")
    assert sum(not _label(r, "completeness", "key_information") for r in results["incomplete"]) >= 3
    good = results["good"]
    assert statistics.mean(r["completeness"]["score"] for r in good) > max(
        r["completeness"]["score"] for r in results["contradicts_context"] + results["incomplete"]
    )
    assert all(r["output_relevance"]["score"] >= 0.75 for r in good)


async def test_a_contradicting_answer_scores_below_the_correct_one() -> None:
    context = ["The museum opens at 9 am and closes at 6 pm, every day except Monday."]
    query = "When does the museum open?"
    correct = "The museum opens at 9 am every day except Monday, and it closes at 6 pm."
    wrong = "The museum opens at 11 pm. It never opens on weekdays. It opens at 9 am on Mondays."
    right, bad = await detect(
        [
            {
                "user_query": query,
                "context": context,
                "generated_text": text,
                "config": {"completeness": {}},
            }
            for text in (correct, wrong)
        ]
    )
    assert bad["completeness"]["score"] < right["completeness"]["score"]
    assert not _label(bad, "completeness", "no_contradiction")


async def test_prioritize_says_the_answer_comes_first_only_when_it_does() -> None:
    query = "Why does my bread come out dense?"
    answer = (
        "Bread usually comes out dense because the dough did not rise enough: the yeast was "
        "old, the kitchen was cold, or the dough was not kneaded long enough to build gluten."
    )
    opener = "Baking bread at home takes practice and patience."
    explained = {}
    for text in (answer, f"{opener} {answer}"):
        [result] = await detect(
            [{"user_query": query, "generated_text": text, "config": {"output_relevance": {}}}]
        )
        assert _label(result, "output_relevance", "prioritize_relevant"), result
        explained[text] = result["output_relevance"]["instructions_list"][1]["explanation"]
    assert explained[answer].startswith("It puts the answer first")
    assert not explained[f"{opener} {answer}"].startswith("It puts the answer first")
    assert "Bread usually comes out dense" in explained[f"{opener} {answer}"]


async def test_word_salad_has_no_clear_structure() -> None:
    [result] = await detect(
        [
            {
                "context": ["Bananas are rich in potassium and are picked green."],
                "generated_text": "banana banana banana banana",
                "config": {"completeness": {}},
            }
        ]
    )
    assert not _label(result, "completeness", "clear_structure")


async def test_a_decoder_loop_breaks_structure_and_is_named() -> None:
    context = [
        "The Eiffel Tower is a wrought-iron tower in Paris, built for the 1889 World's Fair."
    ]
    good = "The Eiffel Tower is in Paris. It was built for the 1889 World's Fair."
    looped = "The Eiffel Tower is in Paris. It was built for the the the the the the the the."
    body = [
        {
            "user_query": "Tell me about the Eiffel Tower",
            "context": context,
            "generated_text": text,
            "config": {"completeness": {}},
        }
        for text in (good, looped)
    ]
    right, bad = await detect(body)
    assert _label(right, "completeness", "clear_structure")
    assert not _label(bad, "completeness", "clear_structure")
    assert bad["completeness"]["score"] < right["completeness"]["score"]
    [structure] = [
        i for i in bad["completeness"]["instructions_list"] if "structure" in i["instruction"]
    ]
    assert "loops on one phrase: 'It was built for the the the" in structure["explanation"]


@pytest.fixture(scope="module")
def dev_results() -> list[tuple[str, dict[str, Any]]]:
    """(detector, result) for every dev row in the shared data, through the real detector path."""
    data = shared_dir() / "data"
    if not (data / "haluquestqa").is_dir():
        pytest.skip(f"dev data not found at {data}; set ASSAY_SHARED_DIR")
    body: list[dict[str, Any]] = []
    for row in read_jsonl(data / "haluquestqa" / "relevance.jsonl"):
        body.append(
            {
                "user_query": row["query"],
                "generated_text": row["response"],
                "config": {"output_relevance": {}},
            }
        )
    for row in read_jsonl(data / "ragchecker_meta_eval" / "human_pairwise.jsonl"):
        for text in {row["response"], row["response_b"]} - {""}:
            body.append(
                {
                    "user_query": row["query"],
                    "context": [row["context"]],
                    "generated_text": text,
                    "config": {"completeness": {}},
                }
            )
    results = asyncio.run(detect(body))
    return [
        (next(iter(item["config"])), result) for item, result in zip(body, results, strict=True)
    ]


def test_labels_follow_their_explanations_on_every_dev_row(
    dev_results: list[tuple[str, dict[str, Any]]],
) -> None:
    wrong = []
    for detector, result in dev_results:
        for entry in result[detector]["instructions_list"]:
            if reports_problem(entry["explanation"]) == entry["label"]:
                wrong.append((entry["instruction"][:40], entry["label"], entry["explanation"]))
    assert not wrong, f"{len(wrong)} explanations disagree with their label, e.g. {wrong[:3]}"


#: A count that undoes its own "only": "only 2 of 2 statements", "only 100% of its sentences".
SELF_DEFEATING = re.compile(r"\bonly (?:(\d+) of \1\b|100%)", re.I)


def test_no_explanation_undoes_its_own_numbers_on_every_dev_row(
    dev_results: list[tuple[str, dict[str, Any]]],
) -> None:
    odd = [
        entry["explanation"]
        for detector, result in dev_results
        for entry in result[detector]["instructions_list"]
        if SELF_DEFEATING.search(QUOTE.sub("''", entry["explanation"]))
    ]
    assert not odd, f"{len(odd)} explanations, e.g. {odd[:3]}"


def test_no_instruction_answers_a_constant_on_the_dev_rows(
    dev_results: list[tuple[str, dict[str, Any]]],
) -> None:
    for name, detector in DETECTORS.items():
        results = [r[name] for d, r in dev_results if d == name]
        for index, instruction in enumerate(detector.instructions):
            probabilities = [r["instructions_list"][index]["follow_probability"] for r in results]
            labels = {r["instructions_list"][index]["label"] for r in results}
            assert statistics.pstdev(probabilities) > 0.03, instruction.check
            assert labels == {True, False}, instruction.check


async def test_without_a_query_query_aspects_speaks_of_the_context() -> None:
    item = {
        "generated_text": "Paul Graham is a computer scientist.",
        "context": "This is a context",
        "config": {"completeness": {}},
    }
    [result] = await detect_items(parse_items([item]))
    explanation = result["completeness"]["instructions_list"][0]["explanation"]  # query_aspects
    assert explanation.startswith("No query was given")
    assert "''" not in explanation and ": ." not in explanation
