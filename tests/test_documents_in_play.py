"""Coverage reads the documents about the query (`signals.in_play`).

A retriever returns several documents; one about another topic holds no key information for
the question, so leaving it out omits nothing, and restating it covers nothing the query needs.
Conflicts and support still read every document.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from assay.detectors import DETECTORS
from assay.detectors.evaluate import detect_items, parse_items
from assay.judges.base import Question
from assay.judges.embedded.encoder import load_encoder
from assay.judges.embedded.judge import gather
from assay.judges.embedded.signals import Evidence, in_play

CHECKS = [i.check for i in DETECTORS["completeness"].instructions]
QUERY = "What happens if I cancel my appointment tomorrow with only 12 hours' notice, and how can I rebook?"
CANCEL = (
    "Riverside Dental charges $45 for an appointment cancelled with less than 24 hours' notice."
)
REBOOK = (
    "Patients can reschedule online or by calling the front desk, which is open 8 am to 6 pm on "
    "weekdays."
)
WHITENING = "Teeth whitening costs $250 per session and is not covered by insurance."
CONTEXT = (CANCEL, REBOOK, WHITENING)
ANSWER = (
    "Cancelling with less than 24 hours' notice costs $45. You can rebook online or by calling "
    "the front desk, open 8 am to 6 pm on weekdays."
)


def evidence(answer: str, context: tuple[str, ...], query: str | None = QUERY) -> Evidence:
    question = Question("completeness", "key_information", "", answer, query, context)
    [found] = gather(load_encoder("minilm"), [question]).values()
    return found


async def completeness(answer: str, context: tuple[str, ...]) -> dict[str, Any]:
    body = [
        {
            "user_query": QUERY,
            "context": list(context),
            "generated_text": answer,
            "config": {"completeness": {}},
        }
    ]
    [result] = await detect_items(parse_items(body), judge="embedded")
    entries = result["completeness"]["instructions_list"]
    return {check: entry for check, entry in zip(CHECKS, entries, strict=True)}


def test_a_document_about_another_topic_is_not_in_play() -> None:
    found = evidence(ANSWER, CONTEXT)
    assert in_play(found).tolist() == [True, True, False]
    assert found.notes["statements"] == "2"
    assert found.notes["covered"] == "2"


def test_one_document_or_no_query_puts_every_statement_in_play() -> None:
    joined = (" ".join(CONTEXT),)
    assert in_play(evidence(ANSWER, joined)).all()
    assert evidence(ANSWER, joined).notes["statements"] == "3"
    assert in_play(evidence(ANSWER, CONTEXT, query=None)).all()


async def test_a_complete_answer_is_not_incomplete_for_leaving_out_another_topic() -> None:
    verdicts = await completeness(ANSWER, CONTEXT)
    for check in ("key_information", "no_omissions"):
        assert verdicts[check]["label"] is True, verdicts[check]
        assert "whitening" not in verdicts[check]["explanation"]
        assert "both context statements about the query" in verdicts[check]["explanation"]


async def test_leaving_out_a_document_the_query_asks_about_is_still_an_omission() -> None:
    found = evidence("Cancelling with less than 24 hours' notice costs $45.", CONTEXT)
    assert found.notes["missing_statements"] == REBOOK
    whole = await completeness(ANSWER, CONTEXT)
    cut = await completeness("Cancelling with less than 24 hours' notice costs $45.", CONTEXT)
    assert cut["key_information"]["label"] is False
    assert (
        cut["key_information"]["follow_probability"]
        < whole["key_information"]["follow_probability"]
    )
    assert REBOOK[:40] in cut["key_information"]["explanation"]
    # The count is of the statements about the query, and says so.
    assert "1 of 2 context statements about the query" in cut["key_information"]["explanation"]


def test_restating_a_document_not_in_play_covers_nothing_more() -> None:
    tangent = ANSWER + " Teeth whitening is $250 a session and insurance does not cover it."
    plain, padded = evidence(ANSWER, CONTEXT), evidence(tangent, CONTEXT)
    for name in ("ctx_word_recall", "ctx_cover_mean", "ctx_cover_share"):
        assert np.isclose(padded.features[name], plain.features[name]), name


def test_documents_of_one_policy_all_stay_in_play() -> None:
    # One document shares the query's words far more than the others, which answer it too.
    policy = (
        "Online orders can be refunded within 30 days of delivery.",
        "Refunds go back to the original payment method within 5 business days.",
        "Sale items are final and cannot be refunded.",
    )
    question = Question(
        "completeness",
        "key_information",
        "",
        "Online orders can be refunded within 30 days.",
        "What is the refund policy for online orders?",
        policy,
    )
    [found] = gather(load_encoder("minilm"), [question]).values()
    assert in_play(found).all()
    assert found.notes["statements"] == "3"
