"""Text written with typographic apostrophes, figures spelt two ways and courtesy lines.

From a walkthrough of hand-written RAG answers: "aren’t" (a typographic apostrophe) was not
read as a negation, so a correct answer was called a contradiction and a wrong one passed;
"$1200" against "$1,200" was a changed number; "Hope this helps!" made an answer a tangent.
"""

from __future__ import annotations

from typing import Any

import pytest

from assay.detectors import DETECTORS
from assay.detectors.evaluate import detect_items, parse_items
from assay.judges.embedded.text import canonical_number, courtesy, split_sentences
from assay.metrics.ood.refusal import matched_cues, refusal_probabilities

CHECKS = {name: [i.check for i in detector.instructions] for name, detector in DETECTORS.items()}


async def labels(detector: str, query: str, context: list[str], answer: str) -> dict[str, Any]:
    body = [
        {
            "user_query": query,
            "context": context,
            "generated_text": answer,
            "config": {detector: {}},
        }
    ]
    [result] = await detect_items(parse_items(body), judge="embedded")
    entries = result[detector]["instructions_list"]
    return {c: e["label"] for c, e in zip(CHECKS[detector], entries, strict=True)}


@pytest.mark.parametrize(
    ("context", "answer", "faithful"),
    [
        ("Pets are not allowed in the hotel.", "Pets aren\u2019t allowed in the hotel.", True),
        ("Pets aren\u2019t allowed in the hotel.", "Pets are allowed in the hotel.", False),
        ("The Pro plan costs $1,200 per year.", "The Pro plan costs $1200 per year.", True),
        ("Parking costs $25 per night.", "Parking costs $25.00 per night.", True),
        ("Parking costs $25 per night.", "Parking costs $35 per night.", False),
    ],
)
async def test_apostrophes_and_figures_are_read_as_meant(
    context: str, answer: str, faithful: bool
) -> None:
    got = await labels("completeness", "What are the rules?", [context], answer)
    assert got["faithful_interpretation"] is faithful
    assert got["no_contradiction"] is faithful


@pytest.mark.parametrize(
    ("value", "canonical"),
    [("1,200", "1200"), ("1,200.50", "1200.5"), ("25.00", "25"), ("2.50", "2.5"), ("2,5", "2,5")],
)
def test_a_figure_has_one_spelling(value: str, canonical: str) -> None:
    assert canonical_number(value) == canonical


async def test_a_courtesy_line_is_no_tangent() -> None:
    query = "How many times can I renew a library book?"
    context = ["Books can be renewed online up to 3 times."]
    for closer in ("Hope this helps!", "Let me know if you have any other questions."):
        answer = f"You can renew books online up to 3 times. {closer}"
        assert split_sentences(answer)[-1] == closer  # not glued to the answer
        got = await labels("output_relevance", query, context, answer)
        assert got["no_tangents"] and got["prioritize_relevant"], closer
        assert (await labels("completeness", query, context, answer))["accurate_and_focused"]


@pytest.mark.parametrize(
    ("sentence", "is_courtesy"),
    [
        ("Hope this helps!", True),
        ("Please let me know if you need anything else!", True),
        ("Is there anything else I can help with?", True),
        ("Great question!", True),
        ("Great question, the answer is 5.", False),
        ("Let me know if the price is right, it costs $5.", False),
        ("The museum opens at 9.", False),
    ],
)
def test_what_counts_as_a_courtesy(sentence: str, is_courtesy: bool) -> None:
    assert courtesy(sentence) is is_courtesy


def test_a_refusal_with_a_typographic_apostrophe_is_a_refusal() -> None:
    curly, plain = "I can\u2019t help with that request.", "I can't help with that request."
    assert matched_cues(curly) == matched_cues(plain) != []
    assert refusal_probabilities([curly]) == refusal_probabilities([plain])
