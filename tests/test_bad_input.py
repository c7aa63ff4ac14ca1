"""Bad request items get errors naming the field; nothing is scored from them."""

from __future__ import annotations

from typing import Any

import pytest

from assay.detectors.evaluate import parse_items
from assay.schema import MAX_CONTEXT_DOCUMENTS, MAX_TEXT_CHARS, RequestValidationError

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
    # Markup alone is no text to judge: the embedded judge crashed on it (a server's 503).
    ("markup-only user_query", {**GOOD, "user_query": "<b></b>"}, "[0].user_query", "only markup"),
    ("markup-only answer", {**GOOD, "generated_text": "<p></p>"}, "[0].generated_text", "markup"),
    (
        "markup-only context",
        {**GOOD, "context": ["<p> </p>", "<br>"], "config": {"completeness": {}}},
        "[0].context",
        "holds only markup",
    ),
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
    ("context of numbers", {**GOOD, "context": [1, 2]}, "[0].context[0]", "must be a string"),
    ("a null document", {**GOOD, "context": ["a", None]}, "[0].context[1]", "must be a string"),
    ("context a number", {**GOOD, "context": 5}, "[0].context", "a string or a list of strings"),
    (
        "explain not a bool",
        {**GOOD, "config": {"output_relevance": {"explain": "yes"}}},
        "[0].config.output_relevance.explain",
        "must be true or false",
    ),
    ("invalid must_compute", {**GOOD, "must_compute": "some"}, "[0].must_compute", "all_or_none"),
    ("publish as string", {**GOOD, "publish": "true"}, "[0].publish", "true or false"),
    ("publish without names", {**GOOD, "publish": True}, "[0].application_name", "publish"),
    (
        "empty config",
        {**GOOD, "config": {}},
        "[0].config",
        "must name at least one detector (output_relevance, completeness)",
    ),
    (
        "unknown field",
        {**GOOD, "generated_txt": "x"},
        "[0].generated_txt",
        "unknown field; known fields: user_query, context, generated_text,",
    ),
    (
        "over-long text",
        {**GOOD, "generated_text": "x" * (MAX_TEXT_CHARS + 1)},
        "[0].generated_text",
        str(MAX_TEXT_CHARS),
    ),
    # A limit says which one, not the union's type message.
    (
        "too many documents",
        {**GOOD, "context": ["x"] * (MAX_CONTEXT_DOCUMENTS + 1)},
        "[0].context",
        f"{MAX_CONTEXT_DOCUMENTS + 1} documents; the limit is {MAX_CONTEXT_DOCUMENTS}",
    ),
    (
        "over-long context",
        {**GOOD, "context": ["x" * 60_000, "y" * 60_000]},
        "[0].context",
        f"120000 characters in total; the limit is {MAX_TEXT_CHARS}",
    ),
    (
        "unknown judge",
        {**GOOD, "config": {"output_relevance": {"judge": "oracle"}}},
        "[0].config.output_relevance.judge",
        "unknown judge",
    ),
    ("item not an object", "just a string", "[0]", "JSON object"),
    (
        "lone surrogate in text",
        {**GOOD, "generated_text": "a \ud800"},
        "[0].generated_text",
        "U+D800",
    ),
    (
        "lone surrogate in a document",
        {**GOOD, "context": ["ok", "\udc80"]},
        "[0].context[1]",
        "UTF-8",
    ),
    (
        "lone surrogate in a config key",
        {**GOOD, "config": {"output_relevance\udfff": {}}},
        "[0].config",
        "a key holds a lone surrogate",
    ),
    # PostgreSQL cannot store a NUL (SQLite can): refused everywhere, so no result depends on
    # the database behind the server.
    (
        "NUL in text",
        {**GOOD, "generated_text": "Shakespeare\x00 wrote it."},
        "[0].generated_text",
        "NUL character (U+0000 at character 11)",
    ),
    (
        "NUL in a metadata value",
        {**GOOD, "tool_trace": [{"step": "a\x00b"}]},
        "[0].tool_trace[0].step",
        "U+0000",
    ),
    (
        "misspelt detector option",
        {**GOOD, "config": {"output_relevance": {"explian": True}}},
        "[0].config.output_relevance.explian",
        "unknown option; known options: detector_name, explain, judge",
    ),
    (
        "custom instructions",
        {**GOOD, "instructions": "Be brief."},
        "[0].instructions",
        "not supported",
    ),
    (
        "empty instructions list",
        {**GOOD, "instructions": []},
        "[0].instructions",
        "remove this field",
    ),
    (
        "application name with a slash",
        {**GOOD, "publish": True, "application_name": "team/app", "model_name": "m"},
        "[0].application_name",
        "letters, digits, '.', '_' and '-'",
    ),
    (
        "application name too long",
        {**GOOD, "publish": True, "application_name": "a" * 101, "model_name": "m"},
        "[0].application_name",
        "1 to 100 characters, got 101",
    ),
    (
        "model name with a space",
        {**GOOD, "publish": True, "application_name": "shop", "model_name": "gpt 4"},
        "[0].model_name",
        ": / @ +",
    ),
    (
        "detector variant these detectors do not have",
        {**GOOD, "config": {"output_relevance": {"detector_name": "hall_v2"}}},
        "[0].config.output_relevance.detector_name",
        "'default'",
    ),
    (
        "long unknown detector name",
        {**GOOD, "config": {"d" * 5000: {}}},
        "[0].config." + "d" * 60 + "… (5000 characters)",
        "unknown detector",
    ),
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


def test_a_tool_trace_from_the_aimon_sdk_is_accepted() -> None:
    [item] = parse_items([{**GOOD, "tool_trace": [{"tool": "search", "output": "..."}]}])
    assert item.tool_trace == [{"tool": "search", "output": "..."}]


def test_null_instructions_are_accepted() -> None:
    [item] = parse_items([{**GOOD, "instructions": None}])
    assert item.instructions is None


def test_names_from_the_documented_character_sets_are_accepted() -> None:
    named = {**GOOD, "publish": True, "application_name": "Shop_EU-2.0"}
    [item] = parse_items([{**named, "model_name": "meta-llama/Llama-3-8B:q4@2024+x"}])
    assert item.application_name == "Shop_EU-2.0"
