"""A support bot's answers: one-line documents, short answers, "the documents don't say".

The dev data's answers are long; these cases come from a walkthrough with hand-written support
cases (`bench/rag_cases.py` scores more of them), where short correct answers lost to flawed
ones.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from assay.detectors import DETECTORS
from assay.detectors.evaluate import detect_items, parse_items
from assay.judges.base import Question
from assay.judges.embedded import agreement as A
from assay.judges.embedded.encoder import load_encoder
from assay.judges.embedded.explanations import explain
from assay.judges.embedded.judge import gather
from assay.judges.embedded.text import numbers, source_remark

CHECKS = [i.check for i in DETECTORS["completeness"].instructions]
FEE_QUERY = "What is the cancellation fee for the annual plan?"
FEE_CONTEXT = (
    "Monthly plans can be cancelled at any time without a fee.",
    "Annual plans renew automatically on the anniversary date.",
)
HONEST = (
    "The documents don't state a cancellation fee for annual plans. They only say monthly plans "
    "can be cancelled without a fee and annual plans renew automatically, so please contact "
    "billing for the annual plan terms."
)
INVENTED = "Cancelling an annual plan costs a fee of $49, or 20% of the remaining months."


async def completeness(query: str | None, context: list[str], answer: str) -> dict[str, Any]:
    body = [
        {
            "user_query": query,
            "context": context,
            "generated_text": answer,
            "config": {"completeness": {}},
        }
    ]
    [result] = await detect_items(parse_items(body), judge="embedded")
    entries: list[dict[str, Any]] = result["completeness"]["instructions_list"]
    return {check: entry for check, entry in zip(CHECKS, entries, strict=True)}


def features(query: str, context: tuple[str, ...], answer: str) -> dict[str, float]:
    question = Question("completeness", "accurate_and_focused", "", answer, query, context)
    [evidence] = gather(load_encoder("minilm"), [question]).values()
    return evidence.features


async def test_a_one_line_context_restated_whole_omits_nothing() -> None:
    # The length the fit weighs counts against a short context as if it were NEEDED_WORDS long.
    context = ["You must be at least 18 years old to open an account."]
    entries = await completeness("How old must I be to open an account?", context, context[0])
    assert entries["no_omissions"]["label"], entries["no_omissions"]["explanation"]
    assert entries["key_information"]["label"]


async def test_saying_what_the_documents_do_not_state_contradicts_nothing() -> None:
    entries = await completeness(FEE_QUERY, list(FEE_CONTEXT), HONEST)
    for check in ("faithful_interpretation", "no_contradiction"):
        assert entries[check]["label"], entries[check]["explanation"]
        assert "contradict" not in entries[check]["explanation"]


def test_a_figure_the_context_never_gives_is_counted_and_named() -> None:
    assert features(FEE_QUERY, FEE_CONTEXT, HONEST)["unstated_number_share"] == 0.0
    assert features(FEE_QUERY, FEE_CONTEXT, INVENTED)["unstated_number_share"] == 1.0
    # A figure the query gives is not invented.
    assert features("Is there a $49 fee?", FEE_CONTEXT, INVENTED)["unstated_number_share"] == 1.0
    asked = "Is the fee $49 or 20% of the remaining months?"
    assert features(asked, FEE_CONTEXT, INVENTED)["unstated_number_share"] == 0.0
    question = Question(
        "completeness", "accurate_and_focused", "", INVENTED, FEE_QUERY, FEE_CONTEXT
    )
    [evidence] = gather(load_encoder("minilm"), [question]).values()
    broken = explain("accurate_and_focused", evidence, 0.2)
    if "states figures" in broken:  # when that feature pulled hardest
        assert "20" in broken and "49" in broken
    assert "figures" not in explain("accurate_and_focused", evidence, 0.8)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Returns within 30 days, refunds in 5.", {"30", "5"}),
        ("Do not take more than 1,200 mg; 1200 mg at most.", {"1200"}),
        ("It costs $49, or 20% of 1.5 months.", {"49", "20", "1.5"}),
        ("He began on the IBM 1401 in 9th grade.", set()),  # a name's number, an ordinal
        ("Install Windows 11 first.", set()),
        ("In 2021 the office moved.", {"2021"}),  # a sentence's first word is no name
    ],
)
def test_numbers_are_the_figures_a_text_states(text: str, expected: set[str]) -> None:
    assert numbers(text) == expected


@pytest.mark.parametrize(
    ("sentence", "remark"),
    [
        ("The documents don't state a cancellation fee.", True),
        ("The policy doesn't say how many days part-timers get.", True),
        ("Weekend support is not mentioned in the documents.", True),
        ("There is no information about part-time staff.", True),
        ("I couldn't find that in the manual.", True),
        ("The policy does not cover water damage.", False),  # a claim about the policy
        ("It does not include SSO.", False),
        ("Dogs are not allowed.", False),
    ],
)
def test_remarks_on_what_the_sources_do_not_say(sentence: str, remark: bool) -> None:
    assert source_remark(sentence) is remark


DOG_CONTEXT = [
    "Service animals are welcome in all our stores.",
    "Pets that are not service animals are not allowed inside.",
]


def conflicts(sentence: str) -> list[A.Conflict]:
    encoder = load_encoder("minilm")
    similarity = encoder.encode(DOG_CONTEXT) @ encoder.encode([sentence]).T
    known = A.known_words(" ".join(DOG_CONTEXT))
    stated = A.stated_sentences(DOG_CONTEXT, [sentence], similarity)
    return A.context_conflicts(DOG_CONTEXT, [sentence], np.asarray(similarity), known, stated)


def test_a_sentence_saying_a_word_both_ways_flips_no_negation() -> None:
    # "service" is plain and negated in the answer: no flip against either statement.
    both = (
        "Service animals are welcome in all our stores, but pets that are not service "
        "animals are not allowed inside."
    )
    assert conflicts(both) == []
    # "allowed" is plain in the answer and only negated in the context: a flip.
    flipped = (
        "Service animals are welcome in all our stores, and pets that are not service "
        "animals are also allowed inside."
    )
    assert [c.kind for c in conflicts(flipped)] == ["negation"]


def test_a_copy_after_a_joining_word_is_stated() -> None:
    copy = "But pets that are not service animals are not allowed inside."
    encoder = load_encoder("minilm")
    similarity = encoder.encode(DOG_CONTEXT) @ encoder.encode([copy]).T
    assert A.stated_sentences(DOG_CONTEXT, [copy], similarity) == frozenset([copy])


def test_the_askers_own_words_are_grounded() -> None:
    # From the hand-written cases: "You qualify, since the threshold is $200 and you owe $340."
    # failed accurate_and_focused, its words from the question read as content the context lacks.
    context = (
        "Existing customers moving home can transfer their broadband for a £49 fee.",
        "No new contract is needed.",
    )
    answer = "You can take your broadband with you to Leeds for the £49 transfer fee."
    asked = features(
        "I'm moving to Leeds next month. Can I take my broadband with me?", context, answer
    )
    other = features("What does a home move cost?", context, answer)
    assert asked["grounding_min"] == 1.0
    assert other["grounding_min"] < 1.0
