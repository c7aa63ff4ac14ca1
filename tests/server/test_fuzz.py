"""Property-based fuzzing of the detect body and the read routes' parameters.

For every generated request the server answers 2xx, or 4xx with exactly `{"message", "status"}`;
never 5xx. A valid request right after each one still succeeds. The runs are bounded and
derandomized (a fixed number of examples, the same ones every run), so the suite stays fast and
deterministic.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings

from assay.server import ServerSettings

from .conftest import API_KEY, AUTH, LiveServer, serve_app
from .fuzz_bodies import encoded_bodies, queries, valid_item

FUZZ = settings(
    max_examples=250,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    database: Path = tmp_path_factory.mktemp("fuzz") / "assay.db"
    settings = ServerSettings(database_url=f"sqlite:///{database}", api_keys=frozenset({API_KEY}))
    for running in serve_app(settings, database):
        seeded = running.post(
            [valid_item() | {"publish": True, "application_name": "shop", "model_name": "m"}]
        )
        assert seeded.status_code == 200
        yield running


@pytest.fixture(scope="module")
def http(server: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, headers=AUTH, timeout=120) as client:
        yield client


def assert_well_formed(response: httpx.Response) -> Any:
    """The answer is 2xx or a 4xx error body; never a 5xx."""
    assert response.status_code < 500, response.text[:500]
    answer = response.json()
    if response.status_code >= 400:
        assert answer == {"message": answer["message"], "status": response.status_code}
        assert isinstance(answer["message"], str) and answer["message"]
    return answer


def assert_still_serving(http: httpx.Client) -> None:
    response = http.post("/v2/detect", json=[valid_item()])
    assert response.status_code == 200, response.text[:500]
    assert response.json()[0]["output_relevance"]["instructions_list"]


def test_fuzzed_detect_bodies_never_get_a_5xx(http: httpx.Client) -> None:
    statuses: list[int] = []

    @FUZZ
    @given(encoded_bodies())
    def check(body: bytes) -> None:
        response = http.post(
            "/v2/detect", content=body, headers={"Content-Type": "application/json"}
        )
        answer = assert_well_formed(response)
        if response.status_code == 200:
            assert isinstance(answer, list) and all(isinstance(item, dict) for item in answer)
        statuses.append(response.status_code)
        assert_still_serving(http)

    check()
    # The generator reaches both sides of the validation, not only one kind of refusal.
    assert 200 in statuses and 400 in statuses and 422 in statuses


def test_fuzzed_read_queries_never_get_a_5xx(http: httpx.Client) -> None:
    statuses: list[int] = []

    @FUZZ
    @given(queries)
    def check(query: tuple[str, str, dict[str, str]]) -> None:
        route, name, params = query
        response = http.get(f"/v1/applications/{name}/{route}", params=params)
        assert_well_formed(response)
        statuses.append(response.status_code)

    check()
    assert 200 in statuses and 404 in statuses and 422 in statuses
    assert_still_serving(http)
