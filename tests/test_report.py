"""Report building blocks: folding output lines, and the page they render to."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any

import pytest

from assay.report import build_report, collect, render_html
from assay.report.collect import WORST_ROWS, read_gold_label
from published_instructions import OUTPUT_RELEVANCE


def relevance(*labels: bool, explanation: str = "") -> dict[str, Any]:
    """An output_relevance result with these labels, in rubric order."""
    entries = [
        {
            "explanation": explanation,
            "follow_probability": 0.9 if label else 0.1,
            "instruction": text,
            "label": label,
        }
        for text, label in zip(OUTPUT_RELEVANCE, labels, strict=True)
    ]
    return {"instructions_list": entries, "score": sum(labels) / len(labels)}


def svgs(page: str) -> list[ET.Element]:
    """Every inline SVG of a page, parsed as XML (which also proves each is well formed)."""
    return [ET.fromstring(s) for s in re.findall(r"<svg\b.*?</svg>", page, flags=re.S)]


def test_any_key_with_a_numeric_score_is_reported_errors_and_rejections_are_counted() -> None:
    lines = [
        {
            "row": 1,
            "id": "a",
            "output_relevance": relevance(True, True, True, True),
            "llm.ood_detection": {"score": 0.8},
            "note": {"score": "not a number"},
        },
        {
            "row": 2,
            "id": "b",
            "output_relevance": {"error": True, "kind": "timeout", "message": "slow"},
            "llm.ood_detection": {"score": 0.4, "instructions_list": []},
        },
        {"row": 3, "output_relevance": {"error": True, "kind": "timeout", "message": "slow"}},
        {"row": 4, "error": {"field": "generated_text", "message": "must not be empty"}},
        {"row": 5, "error": {"field": "user_query", "message": "must be a string"}},
        # A row that timed out as a whole was not "rejected before scoring": its kind is said.
        {"row": 6, "error": {"field": "row", "kind": "timeout", "message": "not scored in 1 s"}},
        {"row": 7, "error": {"field": "row", "kind": "invalid_row", "message": "not an object"}},
    ]

    tally = collect(lines)

    assert list(tally.scorers) == ["output_relevance", "llm.ood_detection"]
    relevance_tally, ood = tally.scorers["output_relevance"], tally.scorers["llm.ood_detection"]
    assert (relevance_tally.rows_scored, dict(relevance_tally.errors)) == (1, {"timeout": 2})
    assert dict(ood.scores) == {0.8: 1, 0.4: 1}
    assert tally.means() == {"output_relevance": 1.0, "llm.ood_detection": pytest.approx(0.6)}
    assert (tally.rows, tally.rows_rejected) == (7, 4)
    assert dict(tally.rejected) == {
        "generated_text": 1, "user_query": 1, "row: timeout": 1, "row": 1
    }  # fmt: skip
    assert [r.row for r in tally.rejected_examples] == [4, 5, 6, 7]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (True, True),
        (0, False),
        (1.0, True),
        ("Yes", True),
        (" fail ", False),
        ("good", True),
        ("bad", False),
        ("maybe", None),
        (2, None),
        (None, None),
        ([1], None),
    ],
)
def test_gold_labels_are_read_from_common_spellings(value: Any, expected: bool | None) -> None:
    assert read_gold_label(value) is expected


def test_gold_labels_per_scorer_and_unreadable_ones_are_counted_not_guessed() -> None:
    lines = [
        {
            "row": 1,
            "gold": {"output_relevance": True},
            "output_relevance": relevance(True, True, True, True),
            "completeness": {"score": 0.5},
        },
        {
            "row": 2,
            "gold": {"output_relevance": "maybe"},
            "output_relevance": relevance(False, True, True, True),
        },
        {
            "row": 3,
            "gold": {"output_relevance": "no"},
            "output_relevance": relevance(False, False, True, True),
        },
    ]

    tally = collect(lines)

    assert tally.gold_column == "gold"
    scorer = tally.scorers["output_relevance"]
    assert (dict(scorer.positive), dict(scorer.negative)) == ({1.0: 1}, {0.5: 1})
    assert not tally.scorers["completeness"].positive and not tally.scorers["completeness"].negative
    assert (tally.labelled_results, tally.unreadable_labels) == (2, 1)
    assert tally.unreadable_example == "'maybe'"


def test_a_rows_unreadable_label_counts_once_whatever_the_number_of_scorers() -> None:
    both = {"output_relevance": {"score": 1.0}, "completeness": {"score": 0.5}}
    lines = [
        {"row": 1, "verdict": "maybe", **both},
        {"row": 2, "verdict": "yes", **both},
        {"row": 3, "verdict": {"output_relevance": "?", "completeness": "??"}, **both},
    ]

    tally = collect(lines, "verdict")

    # Row 1's one label for both scorers, and row 3's two labels, one per scorer.
    assert tally.unreadable_labels == 3
    assert tally.labelled_results == 2


def test_an_explicit_label_column_is_the_only_one_read() -> None:
    lines = [
        {
            "row": 1,
            "label": True,
            "verdict": "bad",
            "output_relevance": relevance(True, True, True, True),
        }
    ]

    assert collect(lines, label_column="verdict").scorers["output_relevance"].negative == {1.0: 1}
    assert collect(lines).scorers["output_relevance"].positive == {1.0: 1}


def test_lowest_rows_keep_the_worst_scores_and_the_earliest_row_among_ties() -> None:
    patterns = [(True,) * 4, (False, True, True, True), (False,) * 4, (False, False, True, True)]
    lines = [
        {"row": n, "id": f"r{n}", "output_relevance": relevance(*patterns[n % 4])}
        for n in range(40)
    ]

    lowest = collect(lines).scorers["output_relevance"].lowest_rows()

    assert len(lowest) == WORST_ROWS
    assert [(r.score, r.row) for r in lowest] == [
        (0.0, 2),
        (0.0, 6),
        (0.0, 10),
        (0.0, 14),
        (0.0, 18),
    ]
    assert [text for text, _, _ in lowest[0].failed] == OUTPUT_RELEVANCE


def test_for_an_error_rate_the_worst_rows_are_the_highest_scores() -> None:
    # `"inverted": true` (a metric's error rate): higher is worse, so the report lists the highest.
    scores = [0.0, 0.9, 0.2, 0.9, 0.5, 1.0, 0.1, 0.7]
    lines = [
        {"row": n, "m": {"score": s, "inverted": True, "instructions_list": []}}
        for n, s in enumerate(scores)
    ]

    tally = collect(lines).scorers["m"]

    assert tally.inverted
    assert [(r.score, r.row) for r in tally.lowest_rows()] == [
        (1.0, 5),
        (0.9, 1),
        (0.9, 3),
        (0.7, 7),
        (0.5, 4),
    ]


def test_page_charts_carry_the_numbers_and_user_text_is_escaped() -> None:
    lines = [
        {
            "row": 1,
            "id": "<script>alert(1)</script>",
            "label": False,
            "output_relevance": relevance(
                False, False, True, False, explanation="<b>off</b> topic"
            ),
        },
        {
            "row": 2,
            "id": "ok",
            "label": True,
            "output_relevance": relevance(True, True, True, True),
        },
        {
            "row": 3,
            "id": "half",
            "label": True,
            "output_relevance": relevance(True, False, True, False),
        },
    ]
    report = build_report(collect(lines), "run.jsonl", {"output_relevance": 0.9}, ["gate failed"])

    page = render_html(report, title="run.jsonl", version="test")

    assert "<script" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&lt;b&gt;off&lt;/b&gt; topic" in page
    charts = {svg.get("data-chart"): svg for svg in svgs(page)}
    assert set(charts) == {"histogram", "failure-rates", "reliability"}
    counts = [
        int(bar.get("data-count", -1))
        for bar in charts["histogram"].iter("{http://www.w3.org/2000/svg}rect")
        if bar.get("class") == "bar"
    ]
    assert counts == [0, 0, 1, 0, 0, 1, 0, 0, 0, 1]  # scores 0.25, 0.5 and 1.0
    failed = {
        bar.get("data-instruction"): int(bar.get("data-failed", -1))
        for bar in charts["failure-rates"].iter("{http://www.w3.org/2000/svg}rect")
        if bar.get("class") == "bar"
    }
    assert failed == dict(zip(OUTPUT_RELEVANCE, [1, 2, 0, 2], strict=True))
    assert "gate failed" in page and "below 0.9" in page


def test_the_gate_cell_gives_the_figure_compared_when_rows_went_unscored() -> None:
    lines = [
        {"row": 1, "output_relevance": relevance(True, True, True, True)},
        {"row": 2, "error": {"field": "generated_text", "message": "must not be empty"}},
    ]
    report = build_report(collect(lines), "run.jsonl", {"output_relevance": 0.9}, ["gate failed"])

    page = render_html(report, title="run.jsonl", version="test")

    # The mean shown is 1.000 over the scored row; the gate compared 0.500.
    assert "below 0.9 (0.500 with 1 unscored row as 0)" in page


def test_an_output_with_only_rejected_rows_still_gives_a_page() -> None:
    lines = [{"row": 1, "error": {"field": "generated_text", "message": "must not be empty"}}]
    report = build_report(collect(lines), "run.jsonl")

    page = render_html(report, title="run.jsonl", version="test")

    assert report.scorers == [] and report.rows_rejected == 1
    assert "No row has a scored result." in page
    assert "must not be empty" in page
    assert svgs(page) == []
