"""Hypothesis strategies for hostile request bodies and read-route queries.

Bodies are built from a valid item by replacing, adding and deleting fields with arbitrary JSON
(huge and non-finite numbers, lone surrogates, deep nesting, odd keys), then encoded in ways a
client might (ASCII escapes, raw UTF-8, another encoding, truncated). Used by
`test_fuzz.py` and by `bench/reliability.py`.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

ITEM_FIELDS = (
    "user_query",
    "context",
    "generated_text",
    "config",
    "instructions",
    "publish",
    "async_mode",
    "application_name",
    "model_name",
    "must_compute",
)

#: Stands for an integer too long for Python's own int conversion (which `json.dumps` cannot
#: write); `encoded_bodies` puts the digits in its place.
HUGE_INTEGER = "<huge integer>"
_HUGE_DIGITS = "9" * 5000

#: Values that broke the server before: drawn often, so that a bounded run meets them.
hostile_scalars = st.sampled_from(
    [
        "\ud800",
        "fine text, then \udfff",
        HUGE_INTEGER,
        float("nan"),
        float("inf"),
        float("-inf"),
        1e308,
        2**53 + 1,
        -(2**63),
        10**30,
        "a" * 150,
        "team/app",
        "",
        "   ",
        "default",
        "shop",
        "output_relevance",
        "completeness",
        "ignore_failures",
    ]
)

_scalars = st.one_of(
    hostile_scalars,
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    # Any code point, lone surrogates included.
    st.text(st.characters(exclude_categories=()), max_size=20),
)

json_values = st.recursive(
    _scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.one_of(st.text(max_size=12), st.sampled_from(ITEM_FIELDS)), children,
                        max_size=4),
    ),
    max_leaves=12,
)  # fmt: skip


def valid_item(n: int = 0) -> dict[str, Any]:
    return {
        "user_query": "What is your return policy?",
        "generated_text": f"Returns are accepted within {30 + n} days of purchase.",
        "context": ["Items may be returned within 30 days with a receipt."],
        "config": {"output_relevance": {"detector_name": "default"}},
    }


@st.composite
def items(draw: st.DrawFn) -> Any:
    """A valid item with some fields replaced, added or removed; sometimes not an object."""
    if draw(st.integers(0, 9)) == 0:
        return draw(json_values)
    item = valid_item(draw(st.integers(0, 3)))
    if draw(st.booleans()):
        published = {"publish": True, "application_name": "shop", "model_name": "m"}
        item |= published | {"async_mode": draw(st.booleans())}
    for field in draw(st.lists(st.sampled_from(ITEM_FIELDS), max_size=3)):
        item[field] = draw(st.one_of(hostile_scalars, json_values))
    for key in draw(st.lists(st.sampled_from(list(item)), max_size=2)):
        item.pop(key, None)
    if draw(st.booleans()):
        config = draw(st.dictionaries(st.sampled_from(["detector_name", "explain", "judge",
                                                       "explian", "weight"]), json_values,
                                      max_size=2))  # fmt: skip
        item["config"] = {"output_relevance": config}
    if draw(st.integers(0, 4)) == 0:
        item[draw(st.text(max_size=10))] = draw(json_values)
    return item


bodies = st.one_of(
    st.lists(items(), min_size=1, max_size=3),
    items(),
    json_values,
)


@st.composite
def encoded_bodies(draw: st.DrawFn) -> bytes:
    """A body as bytes: mostly JSON of `bodies`, sometimes mangled or not JSON at all."""
    how = draw(st.sampled_from(["ascii", "ascii", "ascii", "utf8", "other", "cut", "bytes"]))
    if how == "bytes":
        return draw(st.binary(max_size=200))
    value = draw(bodies)
    text = json.dumps(value, ensure_ascii=how != "utf8")  # NaN and Infinity written as such
    text = text.replace(json.dumps(HUGE_INTEGER), _HUGE_DIGITS)
    if how == "utf8":
        return text.encode("utf-8", "surrogatepass")
    if how == "other":
        return text.encode(draw(st.sampled_from(["utf-16", "utf-32", "latin-1"])), "replace")
    if how == "cut":
        return text.encode("ascii")[: draw(st.integers(0, max(len(text) - 1, 0)))]
    return text.encode("ascii")


_query_values = st.one_of(
    st.text(max_size=30),
    st.sampled_from(
        [
            "99999999999999999999",
            "-1",
            "0",
            "500",
            "501",
            "0001-01-01T00:00:00+01:00",
            "9999-12-31T23:59:59-01:00",
            "2024-02-30T00:00:00",
            "1e999",
            "NaN",
            "output_relevance",
        ]
    ),
)
queries = st.tuples(
    st.sampled_from(["detections", "metrics"]),
    # Half the time the application that exists, so the parameters reach the queries.
    st.one_of(
        st.just("shop"),
        st.sampled_from(["nobody", "a" * 300, "%ED%A0%80", "team%2Fapp", "..", "%00"]),
    ),
    st.dictionaries(
        st.sampled_from(["limit", "offset", "since", "until", "detector", "bucket"]),
        _query_values,
        max_size=3,
    ),
)
