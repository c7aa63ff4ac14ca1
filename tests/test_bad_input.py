"""Bad request items get errors naming the field; nothing is scored from them."""

from __future__ import annotations

from typing import Any

import pytest

from assay.detectors.evaluate import parse_items
from assay.schema import MAX_TEXT_CHARS, RequestValidationError

GOOD: dict[str, Any] = {
    "user_query": "What is your return policy?",
    "generated_text": "Returns are accepted within 30 days.",
    "context": ["Returns are accepted within 30 days of purchase."],
    "config": {"output_relevance": {"detector_name": "default", "explain": True}},
}

CASES: list[tuple[str, Any, str, str]] = [
    ("unknown detector", {**GOOD, "config": {"nope": {}}}, "[0].config.nope", "unknown detector"),
    (
        "missing generated_text",
        {k: v for k, v in GOOD.items() if k != "generated_text"},
        "[0].generated_text",
        "required",
    ),
    ("empty generated_text", {**GOOD, "generated_text": "   "}, "[0].generated_text", "empty"),
    ("missing user_query", {**GOOD, "user_query": None}, "[0].user_query", "output_relevance"),
    ("blank user_query", {**GOOD, "user_query": ""}, "[0].user_query", "missing or empty"),
    (
        "completeness without context",
        {**GOOD, "context": None, "config": {"completeness": {}}},
        "[0].context",
        "completeness",
    ),
    (
        "context of blanks",
        {**GOOD, "context": ["", " "], "config": {"completeness": {}}},
        "[0].context",
        "missing or empty",
    ),
    ("number as query", {**GOOD, "user_query": 42}, "[0].user_query", "string"),
    ("context of numbers", {**GOOD, "context": [1, 2]}, "[0].context", "string"),
    (
        "explain not a bool",
        {**GOOD, "config": {"output_relevance": {"explain": "yes"}}},
        "[0].config.output_relevance.explain",
        "boolean",
    ),
    ("invalid must_compute", {**GOOD, "must_compute": "some"}, "[0].must_compute", "all_or_none"),
    ("publish as string", {**GOOD, "publish": "true"}, "[0].publish", "boolean"),
    ("publish without names", {**GOOD, "publish": True}, "[0].application_name", "publish"),
    ("empty config", {**GOOD, "config": {}}, "[0].config", "at least 1"),
    ("unknown field", {**GOOD, "generated_txt": "x"}, "[0].generated_txt", "not permitted"),
    (
        "over-long text",
        {**GOOD, "generated_text": "x" * (MAX_TEXT_CHARS + 1)},
        "[0].generated_text",
        str(MAX_TEXT_CHARS),
    ),
    (
        "unknown judge",
        {**GOOD, "config": {"output_relevance": {"judge": "oracle"}}},
        "[0].config.output_relevance.judge",
        "unknown judge",
    ),
    ("item not an object", "just a string", "[0]", "JSON object"),
]


@pytest.mark.parametrize(
    ("body", "field", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_bad_item_names_the_field(body: Any, field: str, words: str) -> None:
    with pytest.raises(RequestValidationError) as raised:
        parse_items([body])
    assert raised.value.field == field
    assert words.lower() in raised.value.message.lower()


def test_the_index_of_the_bad_item_is_named() -> None:
    with pytest.raises(RequestValidationError) as raised:
        parse_items([GOOD, {**GOOD, "generated_text": ""}])
    assert raised.value.field == "[1].generated_text"


@pytest.mark.parametrize("body", [[], 42, None])
def test_body_must_be_a_non_empty_list(body: Any) -> None:
    with pytest.raises(RequestValidationError) as raised:
        parse_items(body)
    assert raised.value.field == "body"


def test_context_as_string_or_list_is_accepted() -> None:
    [as_string] = parse_items([{**GOOD, "context": "one document"}])
    [as_list] = parse_items([{**GOOD, "context": ["one", "two"]}])
    assert as_string.context_documents() == ["one document"]
    assert as_list.context_documents() == ["one", "two"]
