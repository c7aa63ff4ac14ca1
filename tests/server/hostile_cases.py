"""Hostile requests and the answer each must get (status and a message fragment).

Every case here once made the server answer 500, answer 5xx for a client's mistake, or accept
something the README says it refuses. `test_hostile_input.py` runs them against a live server;
`bench/reliability.py` counts them for the "Reliability" table.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from typing import Any

KEY = "hostile-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
JSON = {"Content-Type": "application/json"}


@dataclass(frozen=True)
class Hostile:
    """One request and its documented answer.

    body: sent as is (bytes) for POST; None makes the request a GET.
    status: the status the README documents for it.
    message: a fragment the error message must contain ("" for a 2xx).
    """

    name: str
    path: str
    status: int
    message: str
    body: bytes | None = None
    headers: tuple[tuple[str, str], ...] = tuple({**JSON, **AUTH}.items())
    params: tuple[tuple[str, str], ...] = ()


def item(**fields: Any) -> dict[str, Any]:
    """A valid output_relevance item; `fields` override or add fields."""
    base: dict[str, Any] = {
        "user_query": "What is your return policy?",
        "generated_text": "Our return policy allows returns within 30 days of purchase.",
        "config": {"output_relevance": {"detector_name": "default"}},
    }
    return base | fields


def body(*items: dict[str, Any]) -> bytes:
    """Items as a JSON array; `ensure_ascii` writes a lone surrogate as the escape `\\ud800`,
    which is exactly how a hostile client sends one."""
    return json.dumps(list(items), ensure_ascii=True).encode("ascii")


def published(application: str = "shop", **fields: Any) -> dict[str, Any]:
    """A valid item published under `application` (model "model-a" unless given)."""
    return item(publish=True, application_name=application, model_name="model-a") | fields


_VALID = body(item()).decode()
_DETECT = "/v2/detect"
_DETECTIONS = "/v1/applications/shop/detections"
_METRICS = "/v1/applications/shop/metrics"

CASES = [
    # Text that is not valid Unicode: 422 naming the field, never a 503 for everyone.
    Hostile("lone surrogate in generated_text", _DETECT, 422, "[0].generated_text",
            body(item(generated_text="x \ud800"))),
    Hostile("lone surrogate in user_query", _DETECT, 422, "[0].user_query",
            body(item(user_query="why \udfff"))),
    Hostile("lone surrogate in a context document", _DETECT, 422, "[0].context[1]",
            body(item(context=["fine", "bad \ud800"]))),
    Hostile("lone surrogate in a config key", _DETECT, 422, "[0].config",
            body(item(config={"output_relevance\ud800": {}}))),
    Hostile("lone surrogate in application_name", _DETECT, 422, "[0].application_name",
            body(published("shop\ud800"))),
    Hostile("lone surrogate in the second item", _DETECT, 422, "[1].generated_text",
            body(item(), item(generated_text="\ud83d"))),
    # Numbers JSON parsers do not all read the same.
    Hostile("5000-digit integer", _DETECT, 400, "integer",
            _VALID[:-1].encode() + b', {"n": ' + b"9" * 5000 + b"}]"),
    Hostile("5000-digit integer in config", _DETECT, 400, "5000 digits",
            body(item(config={"output_relevance": {"explain": "X"}})).replace(b'"X"', b"1" * 5000)),
    Hostile("integer beyond 2**53", _DETECT, 400, "outside the range",
            body(item(config={"output_relevance": {"explain": "X"}})).replace(
                b'"X"', b"99999999999999999999")),
    Hostile("float overflow", _DETECT, 400, "too large", body(item(score="X")).replace(b'"X"', b"1e999")),
    Hostile("NaN", _DETECT, 400, "NaN",
            body(item(config={"output_relevance": {"explain": "X"}})).replace(b'"X"', b"NaN")),
    Hostile("-Infinity", _DETECT, 400, "Infinity", body(item(publish="X")).replace(b'"X"', b"-Infinity")),
    # What the README says a body is.
    Hostile("UTF-16 body", _DETECT, 400, "UTF-16", _VALID.encode("utf-16")),
    Hostile("UTF-16 body without BOM", _DETECT, 400, "UTF-16", _VALID.encode("utf-16-le")),
    Hostile("UTF-32 body", _DETECT, 400, "UTF-32", _VALID.encode("utf-32")),
    Hostile("charset other than utf-8", _DETECT, 415, "charset", _VALID.encode(),
            (("Content-Type", "application/json; charset=utf-16"), *AUTH.items())),
    # A gzip body was read as text: "not valid UTF-8 JSON (it looks like UTF-16 or UTF-32)".
    Hostile("gzip-compressed body", _DETECT, 415, "Content-Encoding gzip is not supported",
            gzip.compress(_VALID.encode()),
            (("Content-Type", "application/json"), ("Content-Encoding", "gzip"), *AUTH.items())),
    Hostile("duplicate key", _DETECT, 400, "appears twice",
            _VALID.replace('"user_query"', '"generated_text": "a", "user_query"', 1).encode()),
    Hostile("duplicate key in config", _DETECT, 400, "'explain' appears twice",
            body(item(config={"output_relevance": {"explain": True}})).replace(
                b'"explain": true', b'"explain": true, "explain": false')),
    # Pydantic's "a valid dictionary or instance of DetectorConfig" named a class, not JSON.
    Hostile("detector options null", _DETECT, 422,
            "[0].config.output_relevance: must be a JSON object",
            body(item(config={"output_relevance": None}))),
    Hostile("publish body a list", _DETECTIONS, 422, "body: must be a JSON object", b"[]"),
    Hostile("misspelt detector option", _DETECT, 422, "[0].config.output_relevance.explian",
            body(item(config={"output_relevance": {"explian": True}}))),
    Hostile("unknown detector option", _DETECT, 422, "[0].config.output_relevance.weight",
            body(item(config={"output_relevance": {"weight": 0.5}}))),
    Hostile("custom instructions", _DETECT, 422, "[0].instructions: custom instructions",
            body(item(instructions=["Be polite."]))),
    Hostile("UTF-8 BOM is accepted", _DETECT, 200, "", b"\xef\xbb\xbf" + _VALID.encode()),
    Hostile("NUL characters in text are refused (PostgreSQL cannot store them)", _DETECT, 422,
            "[0].generated_text: holds a NUL character",
            body(item(generated_text="Returns\u0000 within 30 days."))),
    # Names: bounded and from a documented character set.
    Hostile("application_name of 101 characters", _DETECT, 422, "1 to 100 characters",
            body(published("a" * 101))),
    Hostile("application_name of 1 MiB", _DETECT, 422, "[0].application_name",
            body(published("a" * (1 << 20)))),
    Hostile("model_name of 1 MiB", _DETECT, 422, "[0].model_name",
            body(published(model_name="m" * (1 << 20)))),
    Hostile("application_name with a slash", _DETECT, 422, "may hold only",
            body(published("team/app"))),
    Hostile("application_name with a space", _DETECT, 422, "[0].application_name",
            body(published("my app"))),
    Hostile("application_name '..'", _DETECT, 422, "[0].application_name", body(published(".."))),
    Hostile("model_name with a newline", _DETECT, 422, "[0].model_name",
            body(published(model_name="gpt\nx"))),
    Hostile("detector_name of 1 MiB", _DETECT, 422, "[0].config.output_relevance.detector_name",
            body(item(config={"output_relevance": {"detector_name": "d" * (1 << 20)}}))),
    Hostile("unknown detector with a 1 MiB name", _DETECT, 422, "unknown detector",
            body(item(config={"x" * (1 << 20): {}}))),
    # Query parameters and path names of the read routes.
    Hostile("offset beyond 64 bits", _DETECTIONS, 422, "offset",
            params=(("offset", "99999999999999999999"),)),
    Hostile("negative offset", _DETECTIONS, 422, "offset", params=(("offset", "-1"),)),
    Hostile("limit not a number", _DETECTIONS, 422, "limit", params=(("limit", "many"),)),
    Hostile("since before year 1 in UTC", _DETECTIONS, 422, "since",
            params=(("since", "0001-01-01T00:00:00+01:00"),)),
    Hostile("until after year 9999 in UTC", _DETECTIONS, 422, "until",
            params=(("until", "9999-12-31T23:59:59-01:00"),)),
    Hostile("metrics since before year 1", _METRICS, 422, "since",
            params=(("since", "0001-01-01T00:00:00+01:00"),)),
    Hostile("metrics until after year 9999", _METRICS, 422, "until",
            params=(("until", "9999-12-31T23:59:59-01:00"),)),
    Hostile("since not a date", _METRICS, 422, "since", params=(("since", "yesterday"),)),
    # A bare number is no ISO 8601 date: FastAPI read it as a Unix timestamp (2027 -> 1970).
    Hostile("since a bare year", _DETECTIONS, 422, "since: '2027' is not a date and time",
            params=(("since", "2027"),)),
    Hostile("until a Unix timestamp", _METRICS, 422, "until: '1700000000' is not a date",
            params=(("until", "1700000000"),)),
    Hostile("bucket unknown", _METRICS, 422, "bucket", params=(("bucket", "fortnight"),)),
    # One of two values was dropped without a word; a backwards range matched nothing.
    Hostile("a parameter given twice", _DETECTIONS, 422, "model: given more than once",
            params=(("model", "a"), ("model", "b"))),
    Hostile("limit given twice", _DETECTIONS, 422, "limit: given more than once",
            params=(("limit", "1"), ("limit", "2"))),
    Hostile("since after until", _METRICS, 422, "since: '2026-02-01' is after until",
            params=(("since", "2026-02-01"), ("until", "2026-01-01"))),
    Hostile("application name with an encoded slash", "/v1/applications/team%2Fapp/detections",
            404, "Not Found"),
    Hostile("job id of 10,000 characters", "/v1/jobs/" + "j" * 10_000, 404, "not found"),
    Hostile("dashboard of an unknown application", "/applications/nobody", 404, "nobody"),
]  # fmt: skip
