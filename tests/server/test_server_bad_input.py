"""Malformed and hostile bodies: each gets its documented status and a message naming the
problem, and the same server keeps serving afterwards."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from assay.server import ServerSettings

from .conftest import AUTH, LiveServer, relevance_item, serve_app


@dataclass(frozen=True)
class Case:
    """A request and what the server must answer: `status` and a `message` fragment."""

    name: str
    body: bytes
    status: int
    message: str
    headers: tuple[tuple[str, str], ...] = (("Content-Type", "application/json"), *AUTH.items())


def _json(value: Any) -> bytes:
    return json.dumps(value).encode()


def _item(**fields: Any) -> bytes:
    return _json([relevance_item(**fields)])


def _without(field: str) -> bytes:
    item = relevance_item()
    del item[field]
    return _json([item])


_NO_AUTH = (("Content-Type", "application/json"),)
_COMPLETENESS = {"completeness": {"detector_name": "default"}}

CASES = [
    Case("not json", b"hello there", 400, "not valid JSON"),
    Case("empty body", b"", 400, "body is empty"),
    Case("truncated json", b'[{"generated_text": ', 400, "not valid JSON"),
    Case("invalid utf-8", b'[{"generated_text": "\xff\xfe"}]', 400, "UTF-8"),
    Case("deep nesting", b"[" * 100_000 + b"]" * 100_000, 400, "nested too deeply"),
    Case(
        "nesting in config",
        _item(config={"output_relevance": {"x": json.loads("[" * 40 + "]" * 40)}}),
        400,
        "nested too deeply",
    ),
    Case(
        "wrong content type",
        _item(),
        415,
        "application/json",
        (("Content-Type", "text/plain"), *AUTH.items()),
    ),
    Case("no content type", _item(), 415, "Content-Type", tuple(AUTH.items())),
    Case("missing auth", _item(), 401, "Authorization", _NO_AUTH),
    Case("wrong key", _item(), 401, "invalid API key", (*_NO_AUTH, ("Authorization", "Bearer x"))),
    Case("number body", b"42", 422, "body: must be a JSON array"),
    Case("null body", b"null", 422, "body: must be a JSON array"),
    Case("empty array", b"[]", 422, "at least one item"),
    Case("item is a string", b'["hello"]', 422, "[0]: each item must be a JSON object"),
    Case("generated_text wrong type", _item(generated_text=12), 422, "[0].generated_text"),
    Case("generated_text missing", _without("generated_text"), 422, "[0].generated_text"),
    Case("generated_text blank", _item(generated_text="   "), 422, "[0].generated_text"),
    Case("config empty", _item(config={}), 422, "[0].config"),
    Case("unknown detector in config", _item(config={"nope": {}}), 422, "[0].config.nope"),
    Case(
        "detector config not an object",
        _item(config={"output_relevance": "yes"}),
        422,
        "[0].config.output_relevance",
    ),
    Case(
        "explain wrong type",
        _item(config={"output_relevance": {"explain": "yes"}}),
        422,
        "[0].config.output_relevance.explain",
    ),
    Case(
        "unknown judge in config",
        _item(config={"output_relevance": {"judge": "oracle"}}),
        422,
        "[0].config.output_relevance.judge",
    ),
    Case("unknown item field", _item(surprise=True), 422, "[0].surprise"),
    Case("query missing for relevance", _without("user_query"), 422, "[0].user_query"),
    Case("context missing for completeness", _item(config=_COMPLETENESS), 422, "[0].context"),
    Case("context of numbers", _item(context=[1, 2]), 422, "[0].context"),
    Case("must_compute invalid", _item(must_compute="sometimes"), 422, "[0].must_compute"),
    Case(
        "publish without application",
        _item(publish=True, model_name="m"),
        422,
        "[0].application_name",
    ),
    Case(
        "async without model",
        _item(async_mode=True, application_name="a"),
        422,
        "[0].model_name",
    ),
    Case("second item bad", _json([relevance_item(), {"generated_text": 1}]), 422, "[1]"),
    Case("huge generated_text", _item(generated_text="a" * 100_001), 413, "[0].generated_text"),
    Case("huge query", _item(user_query="q" * 100_001), 413, "[0].user_query"),
    Case(
        "huge context in total",
        _item(context=["c" * 60_000, "d" * 60_000]),
        413,
        "[0].context",
    ),
    Case("too many documents", _item(context=["c"] * 201), 413, "[0].context: 201 documents"),
    Case("too many items", _json([relevance_item()] * 101), 413, "101 items"),
    Case("body over the byte limit", b'["' + b"x" * (9 * 1024 * 1024) + b'"]', 413, "bytes"),
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """One server for the whole table, so the last test can show it survived all of it."""
    database: Path = tmp_path_factory.mktemp("bad-input") / "assay.db"
    settings = ServerSettings(
        database_url=f"sqlite:///{database}", api_keys=frozenset({AUTH["Authorization"][7:]})
    )
    yield from serve_app(settings, database)


def test_there_are_at_least_twenty_cases() -> None:
    assert len(CASES) >= 20
    assert len({case.name for case in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_bad_body_gets_documented_status_and_message(server: LiveServer, case: Case) -> None:
    response = httpx.post(
        server.url + "/v2/detect", content=case.body, headers=dict(case.headers), timeout=60
    )
    assert response.status_code == case.status, response.text
    body = response.json()
    assert set(body) == {"message", "status"}
    assert body["status"] == case.status
    assert case.message in body["message"], body["message"]


def test_routing_errors_use_the_same_shape(server: LiveServer) -> None:
    missing = httpx.get(server.url + "/v2/nothing-here")
    assert missing.status_code == 404 and missing.json() == {"message": "Not Found", "status": 404}
    wrong_method = httpx.get(server.url + "/v2/detect", headers=AUTH)
    assert wrong_method.status_code == 405 and wrong_method.json()["status"] == 405


def test_server_still_serves_after_the_table(server: LiveServer) -> None:
    response = server.post([relevance_item()])
    assert response.status_code == 200
    assert response.json()[0]["output_relevance"]["instructions_list"]
    assert httpx.get(server.url + "/healthz").json()["status"] == "ok"


def test_every_status_in_the_table_is_in_the_openapi_document(server: LiveServer) -> None:
    document = httpx.get(server.url + "/openapi.json").json()
    documented = set(document["paths"]["/v2/detect"]["post"]["responses"])
    assert {str(case.status) for case in CASES} <= documented


@pytest.mark.parametrize("value", [0.0, -1.0, float("nan"), float("inf")])
def test_settings_refuse_a_lease_that_is_not_a_positive_number(value: float) -> None:
    with pytest.raises(ValueError, match="^job_lease_seconds must be a positive number, got"):
        ServerSettings(job_lease_seconds=value)
