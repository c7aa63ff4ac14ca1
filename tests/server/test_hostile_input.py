"""The hostile-input suite: every request that once broke the server gets its documented
answer, nothing answers 5xx, and the server is unharmed afterwards."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from assay.server import ServerSettings

from .conftest import API_KEY, LiveServer, serve_app
from .hostile_cases import AUTH, CASES, KEY, Hostile, body, item, published


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """One server for the whole table, so the last tests can show it survived all of it."""
    database: Path = tmp_path_factory.mktemp("hostile") / "assay.db"
    keys = frozenset({KEY, API_KEY})  # the table's key, and the one LiveServer.get/post send
    settings = ServerSettings(database_url=f"sqlite:///{database}", api_keys=keys)
    yield from serve_app(settings, database)


def send(server: LiveServer, case: Hostile) -> httpx.Response:
    headers = dict(case.headers)
    if case.body is None:
        return httpx.get(server.url + case.path, params=case.params, headers=headers, timeout=60)
    return httpx.post(server.url + case.path, content=case.body, headers=headers, timeout=120)


def test_cases_are_distinct_and_cover_the_issue() -> None:
    assert len({case.name for case in CASES}) == len(CASES) >= 40


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_hostile_request_gets_its_documented_answer(server: LiveServer, case: Hostile) -> None:
    response = send(server, case)
    assert response.status_code == case.status, response.text[:500]
    if response.headers["content-type"].startswith("text/html"):  # a dashboard page
        assert case.path.startswith("/applications/") and case.message in response.text
        assert len(response.text) < 20_000
        return
    answer = response.json()
    if case.status >= 400:
        assert answer == {"message": answer["message"], "status": case.status}
        assert case.message in answer["message"], answer["message"]
        # Echoing a megabyte-long name back would amplify the attack.
        assert len(answer["message"]) < 1000
    else:
        assert isinstance(answer, list) and "output_relevance" in answer[0]


def test_a_valid_request_still_succeeds_after_the_table(server: LiveServer) -> None:
    response = server.post([item()])
    assert response.status_code == 200
    assert response.json()[0]["output_relevance"]["instructions_list"]


def test_refused_names_do_not_reach_the_database(server: LiveServer) -> None:
    """A 7 MiB name once grew the database by 404 MiB; refused bodies store nothing at all."""
    before = server.database.stat().st_size
    huge = published("a" * (7 << 20))
    response = httpx.post(
        server.url + "/v2/detect",
        content=body(huge),
        headers={"Content-Type": "application/json", **AUTH},
        timeout=120,
    )
    assert response.status_code == 422
    with sqlite3.connect(server.database) as connection:
        longest = connection.execute(
            "SELECT MAX(LENGTH(application_name)) FROM detections"
        ).fetchone()[0]
    assert longest is None or longest <= 100
    assert server.database.stat().st_size - before < 1 << 20


def test_a_name_at_the_limit_is_stored_and_read_back(server: LiveServer) -> None:
    name = "A." + "b_c-" * 24 + "zz"  # 100 characters from the documented set
    assert len(name) == 100
    response = server.post([published(name, model_name="meta-llama/Llama-3-8B:q4@v1+x")])
    assert response.status_code == 200, response.text
    detections = server.get(f"/v1/applications/{name}/detections").json()
    assert detections["total"] == 1
    assert detections["items"][0]["model_name"] == "meta-llama/Llama-3-8B:q4@v1+x"
    listed = [app["name"] for app in server.get("/v1/applications").json()]
    assert name in listed
    assert server.get(f"/applications/{name}").status_code == 200


def test_error_statuses_are_in_the_openapi_document(server: LiveServer) -> None:
    document = httpx.get(server.url + "/openapi.json").json()
    documented = set(document["paths"]["/v2/detect"]["post"]["responses"])
    posted = {str(case.status) for case in CASES if case.body is not None}
    assert posted <= documented
