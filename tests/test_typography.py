"""Text written with typographic apostrophes, figures spelt two ways and courtesy lines.

From a walkthrough of hand-written RAG answers: "aren’t" (a typographic apostrophe) was not
read as a negation, so a correct answer was called a contradiction and a wrong one passed;
"$1200" against "$1,200" was a changed number; "Hope this helps!" made an answer a tangent.
Later walkthroughs: "2 weeks" against "14 days", or a date written two ways, was a changed
number.
"""

from __future__ import annotations

from typing import Any

import pytest

from assay.detectors import DETECTORS
from assay.detectors.evaluate import detect_items, parse_items
from assay.judges.embedded.text import (
    canonical_number,
    courtesy,
    figures,
    numbers,
    quantity,
    split_sentences,
)
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


# (context, answer, faithful, no_contradiction): None where the stricter contradiction check
# may let a one-word change pass.
MEANINGS = [
    ("Pets are not allowed in the hotel.", "Pets aren\u2019t allowed in the hotel.", True, True),
    ("Pets aren\u2019t allowed in the hotel.", "Pets are allowed in the hotel.", False, False),
    ("The Pro plan costs $1,200 per year.", "The Pro plan costs $1200 per year.", True, True),
    ("Parking costs $25 per night.", "Parking costs $25.00 per night.", True, True),
    ("Parking costs $25 per night.", "Parking costs $35 per night.", False, False),
    ("Refunds are issued within 2 weeks.", "Refunds are issued within 14 days.", True, True),
    ("Support replies within 24 hours.", "Support replies within 1 day.", True, True),
    ("The warranty lasts 1 year.", "The warranty lasts 12 months.", True, True),
    ("Refunds are issued within 2 weeks.", "Refunds are issued within 2 days.", False, None),
    ("The sale ends on March 5, 2026.", "The sale ends on 2026-03-05.", True, True),
    ("Sale items are final and cannot be returned.", "Sale items can be returned.", False, None),
]


@pytest.mark.parametrize(("context", "answer", "faithful", "consistent"), MEANINGS)
async def test_one_meaning_written_two_ways_is_read_as_one(
    context: str, answer: str, faithful: bool, consistent: bool | None
) -> None:
    got = await labels("completeness", "What are the rules?", [context], answer)
    assert got["faithful_interpretation"] is faithful
    if consistent is not None:
        assert got["no_contradiction"] is consistent


@pytest.mark.parametrize(
    ("value", "after", "compared"),
    [
        ("2", " weeks", "14"),
        ("14", " days.", "14"),
        ("2", "-week", "14"),
        ("48", " hours", "2"),
        ("36", " hours", "36"),
        ("1.5", " hours", "90"),
        ("90", " minutes", "90"),
        ("1", " year", "12"),
        ("18", " months", "18"),
        ("5", " business days", "5"),  # a unit after another word is left as written
        ("2", " weekends", "2"),
    ],
)
def test_a_duration_is_compared_in_one_unit(value: str, after: str, compared: str) -> None:
    assert quantity(value, after) == compared


def test_figures_say_how_they_were_written() -> None:
    assert figures("Refunds take 2 weeks and cost $1,200.") == {"14": "2 weeks", "1200": "1,200"}
    # A month named next to a day states its number, so ISO and written dates agree.
    assert numbers("Opens March 5, 2026.") == numbers("Opens 2026-03-05.") == {"3", "5", "2026"}
    assert numbers("Available 24 hours a day.") == {"1"}
    assert numbers("Available 24 hours a day.", plain=True) == {"1", "24"}
    assert numbers("You may 5 times visit the market 5") == {"5"}


@pytest.mark.parametrize(
    ("text", "read"),
    [
        # A figure against its unit is the figure, as with a space.
        ("Prints cost 12p each.", {"12"}),
        ("Open 10am to 7pm.", {"10", "7"}),
        ("A 25kg bag.", {"25"}),
        ("Popular in the 1990s.", {"1990"}),
        # Against other letters it is none: never a part of its digits.
        ("Due on the 21st.", set()),
        ("Turn on 2FA.", set()),
        ("It runs 2.5x faster.", set()),
    ],
)
def test_a_figure_is_read_whole(text: str, read: set[str]) -> None:
    assert numbers(text) == read


@pytest.mark.parametrize(
    ("value", "canonical"),
    [
        ("1,200", "1200"),
        ("1,200.50", "1200.5"),
        ("25.00", "25"),
        ("2.50", "2.5"),
        ("2,5", "2,5"),
        ("05", "5"),
        ("00", "0"),
        ("007.50", "7.5"),
    ],
)
def test_a_figure_has_one_spelling(value: str, canonical: str) -> None:
    assert canonical_number(value) == canonical


async def test_a_courtesy_line_is_no_tangent() -> None:
    query = "How many times can I renew a library book?"
    context = ["Books can be renewed online up to 3 times."]
    for closer in (
        "Hope this helps!",
        "Let me know if you have any other questions.",
        "If you have any other questions, feel free to ask.",
    ):
        answer = f"You can renew books online up to 3 times. {closer}"
        assert split_sentences(answer)[-1] == closer  # not glued to the answer
        got = await labels("output_relevance", query, context, answer)
        assert got["no_tangents"] and got["prioritize_relevant"], closer
        assert (await labels("completeness", query, context, answer))["accurate_and_focused"]
    answer = "Here's what you need to know:\n\nYou can renew books online up to 3 times."
    assert split_sentences(answer)[0] == "Here's what you need to know:"
    got = await labels("output_relevance", query, context, answer)
    assert got["no_tangents"] and got["prioritize_relevant"]
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
        # Framing lines and courtesies with a comma (a walkthrough found each read as a tangent
        # and an unsupported claim, p 0.03-0.06).
        ("If you have any other questions, feel free to ask.", True),
        ("Thanks for reaching out!", True),
        ("Here's what you need to know:", True),
        ("Based on the provided documents, here is the answer:", True),
        ("According to the context:", True),
        ("Sure!", True),
        ("If you have any other questions, the desk is open 24/7.", False),
        ("Based on the documents, refunds take 5 days.", False),
        ("Here is how it works: you pay first.", False),
        ("Thank you for your question, the fee is 5 dollars.", False),
    ],
)
def test_what_counts_as_a_courtesy(sentence: str, is_courtesy: bool) -> None:
    assert courtesy(sentence) is is_courtesy


def test_a_refusal_with_a_typographic_apostrophe_is_a_refusal() -> None:
    curly, plain = "I can\u2019t help with that request.", "I can't help with that request."
    assert matched_cues(curly) == matched_cues(plain) != []
    assert refusal_probabilities([curly]) == refusal_probabilities([plain])
