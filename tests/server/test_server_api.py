"""The HTTP API on a real loopback server with a real SQLite file and the embedded judge."""

from __future__ import annotations

import asyncio
import base64
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from assay import AsyncClient, Client
from assay.detectors.evaluate import detect_items, parse_items
from assay.judges import Judge, Question, Verdict, register_judge
from assay.schema import DetectorFailed, JudgeFailure, RequestValidationError
from assay.server import ServerSettings
from assay.server.worker import JobWorker
from assay.store import Store, jobs
from assay.transport import AuthenticationError
from conftest import assert_relevance_contract, both_backends

from .conftest import (
    API_KEY,
    AUTH,
    GatedJudge,
    LiveServer,
    ServerFactory,
    published,
    relevance_item,
    serve_app,
)


@both_backends
def test_detect_returns_exactly_what_the_core_computes(live_server: LiveServer) -> None:
    body = [
        relevance_item(),
        relevance_item(
            context=["Items may be returned within 30 days with a receipt."],
            config={"output_relevance": {}, "completeness": {"explain": True}},
        ),
    ]
    response = live_server.post(body)
    assert response.status_code == 200, response.text
    expected = asyncio.run(detect_items(parse_items(body)))
    assert response.json() == expected
    assert set(response.json()[1]) == {"output_relevance", "completeness"}
    assert_relevance_contract(response.json()[0]["output_relevance"])


@pytest.mark.parametrize("path", ["/v1/detect", "/v3/detect"])
def test_detect_aliases(live_server: LiveServer, path: str) -> None:
    canonical = live_server.post([relevance_item()]).json()
    assert live_server.post([relevance_item()], path=path).json() == canonical


@pytest.mark.parametrize(
    "header",
    [
        f"Bearer {API_KEY}",
        API_KEY,
        "Basic " + base64.b64encode(f"anyone:{API_KEY}".encode()).decode(),
    ],
)
def test_accepted_authorization_forms(live_server: LiveServer, header: str) -> None:
    response = live_server.post([relevance_item()], headers={"Authorization": header})
    assert response.status_code == 200, response.text


@pytest.mark.parametrize(
    "header", [None, "Bearer wrong", "wrong", "Bearer", "Basic !!!", "Token test-key-x"]
)
def test_bad_or_missing_key_is_401(live_server: LiveServer, header: str | None) -> None:
    headers = {} if header is None else {"Authorization": header}
    response = httpx.post(live_server.url + "/v2/detect", json=[relevance_item()], headers=headers)
    assert response.status_code == 401
    assert response.json()["status"] == 401
    assert "API key" in response.json()["message"] or "Authorization" in response.json()["message"]
    assert httpx.get(live_server.url + "/v1/applications", headers=headers).status_code == 401


def test_no_auth_mode_needs_no_key(make_server: ServerFactory) -> None:
    server = make_server(auth=False, api_keys=frozenset())
    assert httpx.post(server.url + "/v2/detect", json=[relevance_item()]).status_code == 200


@both_backends
def test_publish_stores_and_read_endpoints_report_it(live_server: LiveServer) -> None:
    body = [
        published("shop", "model-a"),
        published("shop", "model-b", generated_text="The Eiffel Tower is in Paris."),
        published("bank", "model-a"),
        relevance_item(),  # not published
    ]
    assert live_server.post(body).status_code == 200
    applications = live_server.get("/v1/applications").json()
    assert [a["name"] for a in applications] == ["bank", "shop"]
    shop = applications[1]
    assert shop["models"] == ["model-a", "model-b"] and shop["detections"] == 2
    assert 0.0 <= shop["mean_scores"]["output_relevance"] <= 1.0

    page = live_server.get("/v1/applications/shop/detections", params={"limit": 1}).json()
    assert page["total"] == 2 and len(page["items"]) == 1
    second = live_server.get(
        "/v1/applications/shop/detections", params={"limit": 1, "offset": 1}
    ).json()
    assert second["items"][0]["id"] != page["items"][0]["id"]
    # A query parameter is named as the other messages name fields (it read "query.limit: ...").
    bad = live_server.get("/v1/applications/shop/detections", params={"limit": "many"})
    assert bad.status_code == 422 and bad.json()["message"].startswith("limit: ")
    stored = page["items"][0]
    assert stored["detector"] == "output_relevance"
    assert_relevance_contract(stored["result"])
    assert stored["score"] == stored["result"]["score"]

    none = live_server.get(
        "/v1/applications/shop/detections", params={"detector": "completeness"}
    ).json()
    assert none["total"] == 0
    # A filter left blank is not given, as in the dashboard's form (it matched no model).
    blank = live_server.get("/v1/applications/shop/detections", params={"model": ""}).json()
    assert blank["total"] == 2
    future = live_server.get(
        "/v1/applications/shop/detections", params={"since": "2999-01-01T00:00:00Z"}
    ).json()
    assert future["total"] == 0
    past = live_server.get(
        "/v1/applications/shop/detections", params={"until": "2000-01-01T00:00:00+02:00"}
    ).json()
    assert past["total"] == 0

    metrics = live_server.get("/v1/applications/shop/metrics", params={"bucket": "day"}).json()
    [bucket] = metrics["detectors"]["output_relevance"]
    assert bucket["count"] == 2
    scores = [
        item["score"]
        for item in live_server.get("/v1/applications/shop/detections").json()["items"]
    ]
    assert bucket["mean_score"] == pytest.approx(sum(scores) / 2, abs=1e-4)


def test_read_endpoint_errors(live_server: LiveServer) -> None:
    missing = live_server.get("/v1/applications/nobody/detections")
    assert missing.status_code == 404 and "nobody" in missing.json()["message"]
    # A name no application can have says so, as publishing to it does.
    for path in ("detections", "metrics"):
        impossible = live_server.get(f"/v1/applications/bad%20name/{path}")
        assert impossible.status_code == 422
        assert impossible.json()["message"].startswith("application_name: may hold only")
    live_server.post([published()])
    bad_limit = live_server.get("/v1/applications/shop/detections", params={"limit": 0})
    assert bad_limit.status_code == 422 and "limit" in bad_limit.json()["message"]
    bad_bucket = live_server.get("/v1/applications/shop/metrics", params={"bucket": "year"})
    assert bad_bucket.status_code == 422 and "bucket" in bad_bucket.json()["message"]
    bad_detector = live_server.get("/v1/applications/shop/metrics", params={"detector": "nope"})
    assert bad_detector.status_code == 422 and "nope" in bad_detector.json()["message"]
    assert live_server.get("/v1/jobs/not-a-job").status_code == 404


def test_healthz_reports_the_embedding_cache(live_server: LiveServer) -> None:
    item = relevance_item(generated_text=f"Returns are accepted for 30 days ({uuid.uuid4()}).")

    def cache() -> dict[str, Any]:
        counts: dict[str, Any] = httpx.get(live_server.url + "/healthz").json()["embedding_cache"]
        return counts

    assert live_server.post([item]).status_code == 200
    first = cache()
    assert live_server.post([item]).status_code == 200
    second = cache()
    # The same item again: every text is found, none encoded.
    assert second["misses"] == first["misses"] and second["hits"] > first["hits"]
    assert 0 < second["hit_rate"] <= 1 and second["entries"] > 0 and second["max_mb"] > 0


def test_healthz_counts_the_jobs_this_process_holds(
    live_server: LiveServer, gated_judge: GatedJudge
) -> None:
    def held() -> int:
        count: int = httpx.get(live_server.url + "/healthz").json()["worker"]["running"]
        return count

    assert held() == 0
    item = published(async_mode=True, config={"output_relevance": {"judge": "gated"}})
    job_id = live_server.post([item]).json()[0]["job_id"]
    deadline = time.monotonic() + 30
    while held() != 1:
        assert time.monotonic() < deadline, "the worker never took the job"
        time.sleep(0.02)
    gated_judge.gate.set()
    assert live_server.wait_for_job(job_id)["state"] == "done"
    deadline = time.monotonic() + 30
    while held() != 0:
        assert time.monotonic() < deadline, "the finished job is still counted"
        time.sleep(0.02)


def first_unhealthy(server: LiveServer) -> httpx.Response:
    """The first /healthz answer that is not 200 (within 30 s)."""
    deadline = time.monotonic() + 30
    while (health := httpx.get(server.url + "/healthz")).status_code == 200:
        assert time.monotonic() < deadline, "healthz kept answering ok"
        time.sleep(0.02)
    return health


def test_healthz_is_503_while_the_worker_cannot_claim_jobs(
    make_server: ServerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Claims failed on every poll (a lease too long for a date) while /healthz said ok and
    # queued jobs never ran.
    def failing(*args: object, **kwargs: object) -> list[jobs.ClaimedJob]:
        raise OverflowError("date value out of range")

    monkeypatch.setattr(jobs, "claim", failing)
    server = make_server()
    health = first_unhealthy(server)
    assert health.json()["message"] == (
        "the job worker cannot claim jobs: date value out of range; see the server log"
    )


def test_a_crashed_job_worker_turns_healthz_503_and_is_logged(
    make_server: ServerFactory, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(self: JobWorker) -> None:
        raise RuntimeError("worker bug")

    monkeypatch.setattr(JobWorker, "_wait_for_change", broken)
    server = make_server()
    health = first_unhealthy(server)
    assert health.status_code == 503
    assert health.json() == {"message": "the job worker stopped; see the server log", "status": 503}
    assert any(
        record.levelname == "CRITICAL" and "worker bug" in str(record.exc_info)
        for record in caplog.records
    )


def test_detectors_health_and_openapi(live_server: LiveServer) -> None:
    detectors = live_server.get("/v1/detectors").json()
    assert [d["name"] for d in detectors] == ["output_relevance", "completeness"]
    health = httpx.get(live_server.url + "/healthz").json()
    assert health["status"] == "ok" and set(health["jobs"]) == {
        "queued",
        "running",
        "done",
        "failed",
    }
    document = httpx.get(live_server.url + "/openapi.json").json()
    for path in ("/v2/detect", "/v1/detect", "/v3/detect"):
        operation = document["paths"][path]["post"]
        assert {"401", "413", "422", "429", "503"} <= set(operation["responses"])
        schema = operation["requestBody"]["content"]["application/json"]["schema"]
        assert schema["items"]["$ref"] == "#/components/schemas/DetectRequestItem"
    item_schema = document["components"]["schemas"]["DetectRequestItem"]
    assert "generated_text" in item_schema["required"]
    assert {"/v1/jobs/{job_id}", "/v1/applications", "/healthz"} <= set(document["paths"])


class _FailOneDetector(Judge):
    """Fault injection: fails every completeness question, answers the rest."""

    name = "half-broken"
    kind, message = "timeout", "injected timeout"

    async def answer(self, questions: Sequence[Question]) -> list[Verdict | JudgeFailure]:
        return [
            JudgeFailure(self.kind, self.message)
            if q.detector == "completeness"
            else Verdict(0.9, "fine")
            for q in questions
        ]


@pytest.fixture
def half_broken() -> str:
    register_judge("half-broken", _FailOneDetector)
    return "half-broken"


class _RefuseLongInput(_FailOneDetector):
    """Fault injection: an LLM endpoint that refuses every completeness question's input."""

    name = "refuses-input"
    kind, message = "input_too_long", "context length exceeded"


def test_a_failure_of_the_items_own_input_is_a_422_not_retried(
    make_server: ServerFactory,
) -> None:
    register_judge("refuses-input", _RefuseLongInput)
    server = make_server()
    response = server.post([relevance_item(), _two_detectors("refuses-input", "all_or_none")])
    # A 503 would be sent again by every client, to fail the same way.
    assert response.status_code == 422
    assert response.json()["message"].startswith("[1].config.completeness: detector")
    assert "input_too_long" in response.json()["message"]
    assert response.json()["failure"] == {
        "item": 1,
        "detector": "completeness",
        "kind": "input_too_long",
        "message": "context length exceeded",
    }
    assert _stored_rows(server) == 0
    # The Python client raises what it raises in-process (it raised a bare 422 error), under
    # the same message.
    body = [relevance_item(), _two_detectors("refuses-input", "all_or_none")]
    with pytest.raises(DetectorFailed) as remote:
        Client(base_url=server.url, auth_header=f"Bearer {API_KEY}").inference.detect(body=body)
    with pytest.raises(DetectorFailed) as local:
        Client().inference.detect(body=body)
    assert (remote.value.detector, remote.value.failure.kind) == ("completeness", "input_too_long")
    assert str(remote.value) == str(local.value)


def _two_detectors(judge: str, must_compute: str) -> dict[str, object]:
    return published(
        context=["Returns within 30 days."],
        config={"output_relevance": {"judge": judge}, "completeness": {"judge": judge}},
        must_compute=must_compute,
    )


def _stored_rows(server: LiveServer) -> int:
    return server.count("detections")


@both_backends
def test_all_or_none_failure_is_503_and_stores_nothing(
    live_server: LiveServer, half_broken: str
) -> None:
    async_item = published(async_mode=True)
    body = [async_item, published(), _two_detectors(half_broken, "all_or_none")]
    response = live_server.post(body)
    assert response.status_code == 503
    assert response.json()["status"] == 503
    # Named by its place in the request, though the async item before it was not judged.
    assert response.json()["message"].startswith("[2].config.completeness: detector")
    assert _stored_rows(live_server) == 0


@both_backends
def test_ignore_failures_returns_error_object_and_the_rest(
    live_server: LiveServer, half_broken: str
) -> None:
    response = live_server.post([_two_detectors(half_broken, "ignore_failures")])
    assert response.status_code == 200
    [item] = response.json()
    assert item["completeness"] == {"error": True, "kind": "timeout", "message": "injected timeout"}
    assert item["output_relevance"]["score"] == 1.0
    detections = live_server.get("/v1/applications/shop/detections").json()["items"]
    by_detector = {d["detector"]: d for d in detections}
    assert by_detector["completeness"]["score"] is None
    assert by_detector["completeness"]["error"] == "injected timeout"


@both_backends
def test_async_item_is_accepted_then_finished_by_the_worker(live_server: LiveServer) -> None:
    body = [published(async_mode=True), relevance_item()]
    response = live_server.post(body)
    assert response.status_code == 200
    accepted, computed = response.json()
    assert accepted["message"] == "Data successfully sent to Assay."
    assert accepted["status"] == 200
    assert_relevance_contract(computed["output_relevance"])
    job = live_server.wait_for_job(accepted["job_id"])
    assert job["state"] == "done" and job["attempts"] == 1
    assert_relevance_contract(job["result"]["output_relevance"])
    [stored] = live_server.get("/v1/applications/shop/detections").json()["items"]
    assert stored["job_id"] == accepted["job_id"]
    assert stored["result"] == job["result"]["output_relevance"]


@both_backends
def test_async_job_whose_detector_fails_is_marked_failed(
    live_server: LiveServer, half_broken: str
) -> None:
    item = _two_detectors(half_broken, "all_or_none") | {"async_mode": True}
    # Third in its request: the job's error names no position (it said "[0]", another item).
    job_id = live_server.post([relevance_item(), relevance_item(), item]).json()[2]["job_id"]
    job = live_server.wait_for_job(job_id)
    assert job["state"] == "failed" and "completeness" in job["error"]
    assert not job["error"].startswith("[")
    assert _stored_rows(live_server) == 0


def test_assay_clients_work_against_the_server(live_server: LiveServer) -> None:
    expected = live_server.post([relevance_item()]).json()
    with Client(auth_header=f"Bearer {API_KEY}", base_url=live_server.url) as client:
        response = client.inference.detect(body=[relevance_item()])
        assert [dict(item) for item in response] == expected
        assert response[0].output_relevance == expected[0]["output_relevance"]
        # Refused before it is sent, as in-process (the server answered a 422).
        with pytest.raises(RequestValidationError, match=r"\[0\]\.user_query"):
            client.inference.detect(body=[relevance_item(user_query=None)])
    with pytest.raises(AuthenticationError):
        Client(auth_header="Bearer nope", base_url=live_server.url).inference.detect(
            body=[relevance_item()]
        )

    async def run_async() -> list[dict[str, object]]:
        async with AsyncClient(auth_header=API_KEY, base_url=live_server.url) as client:
            return [dict(item) for item in await client.inference.detect(body=[relevance_item()])]

    assert asyncio.run(run_async()) == expected


def test_saturated_server_answers_429_with_retry_after(
    make_server: ServerFactory, gated_judge: GatedJudge
) -> None:
    server = make_server(max_in_flight=1)
    held = relevance_item(config={"output_relevance": {"judge": "gated"}})
    results: list[httpx.Response] = []
    first = threading.Thread(target=lambda: results.append(server.post([held])))
    first.start()
    deadline = time.monotonic() + 30
    while server.app.state.in_flight < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    busy = server.post([relevance_item()])
    assert busy.status_code == 429
    assert busy.headers["retry-after"] == "1"
    assert busy.json() == {"message": busy.json()["message"], "status": 429}
    gated_judge.gate.set()
    first.join(timeout=60)
    assert results[0].status_code == 200
    assert server.post([relevance_item()]).status_code == 200  # serving again


def test_a_request_whose_client_gave_up_stores_nothing(
    live_server: LiveServer, gated_judge: GatedJudge
) -> None:
    # AIMon's SDK waits 60 s and sends again: a slow judge's result was stored twice.
    item = relevance_item(
        config={"output_relevance": {"judge": "gated"}},
        publish=True,
        application_name="gaveup",
        model_name="m",
    )
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{live_server.url}/v2/detect", json=[item], headers=AUTH, timeout=0.5)
    in_flight = live_server.app.state
    deadline = time.monotonic() + 30
    gated_judge.gate.set()
    while in_flight.in_flight and time.monotonic() < deadline:  # the request finishes
        time.sleep(0.05)
    time.sleep(0.2)

    assert [a["name"] for a in live_server.get("/v1/applications").json()] == []
    again = live_server.post([item])  # the client's retry is stored, once
    assert again.status_code == 200
    assert live_server.get("/v1/applications/gaveup/detections").json()["total"] == 1


@both_backends
def test_clean_shutdown_hands_running_jobs_back(
    tmp_path: Path, database_url: str, gated_judge: GatedJudge
) -> None:
    settings = ServerSettings(database_url=database_url, api_keys=frozenset({API_KEY}))
    running = serve_app(settings, tmp_path / "unused.db")
    server = next(running)
    held = published(async_mode=True, config={"output_relevance": {"judge": "gated"}})
    job_id = server.post([held]).json()[0]["job_id"]
    deadline = time.monotonic() + 30
    while server.get(f"/v1/jobs/{job_id}").json()["state"] != "running":
        assert time.monotonic() < deadline, "job never started"
        time.sleep(0.02)
    next(running, None)  # stop the server while the job waits on the judge
    job = jobs.get(Store(database_url), job_id)
    assert job is not None and (job.state, job.attempts) == ("queued", 0)


def test_read_routes_refuse_unknown_parameters_and_filter_by_model(
    live_server: LiveServer,
) -> None:
    for model in ("m1", "m2"):
        body = [published(model=model)]
        assert live_server.post(body).status_code == 200
    path = "/v1/applications/shop"
    page = live_server.get(f"{path}/detections", params={"model": "m2"}).json()
    assert page["total"] == 1 and page["items"][0]["model_name"] == "m2"
    series = live_server.get(f"{path}/metrics", params={"model": "m1"}).json()["detectors"]
    assert [bucket["count"] for bucket in series["output_relevance"]] == [1]
    for route, parameter in ((f"{path}/detections", "detecter"), (f"{path}/metrics", "limit")):
        response = live_server.get(route, params={parameter: "x"})
        assert response.status_code == 422
        assert response.json()["message"].startswith(f"{parameter}: unknown query parameter")
    head = httpx.head(live_server.url + "/healthz")
    assert head.status_code == 200 and head.content == b""
    document = httpx.get(live_server.url + "/openapi.json").json()
    assert "503" in document["paths"]["/healthz"]["get"]["responses"]
    # No page that would fetch Swagger or ReDoc from a CDN.
    assert httpx.get(live_server.url + "/docs").status_code == 404
    assert httpx.get(live_server.url + "/redoc").status_code == 404


def test_an_unreachable_database_is_a_503_and_the_connection_lives_on(
    live_server: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from contextlib import contextmanager

    from sqlalchemy.exc import OperationalError

    @contextmanager
    def down(*args: Any, **kwargs: Any) -> Any:
        raise OperationalError("SELECT 1", {}, ConnectionRefusedError("connection refused"))
        yield

    store = live_server.app.state.store
    with httpx.Client(base_url=live_server.url, headers=AUTH, timeout=60) as client:
        monkeypatch.setattr(store, "reading", down)
        response = client.get("/v1/applications")
        assert response.status_code == 503
        assert response.json() == {
            "message": "the database is unavailable; retry later",
            "status": 503,
        }
        assert response.headers["retry-after"] == "5"
        # The same keep-alive connection still answers (an unhandled error used to drop it).
        assert client.get("/v1/detectors").status_code == 200
        monkeypatch.undo()
        assert client.get("/v1/applications").status_code == 200


async def test_a_database_outage_is_logged_once_not_at_every_poll(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from assay.server import worker as worker_module

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise ConnectionRefusedError("connection refused")

    url = f"sqlite:///{tmp_path / 'assay.db'}"
    store = Store(url)
    store.migrate()
    worker = JobWorker(store, ServerSettings(database_url=url, auth=False))
    monkeypatch.setattr(worker_module.jobs, "claim", refused)
    with caplog.at_level("WARNING", logger="assay.server.worker"):
        for _ in range(20):
            assert await worker._claim(1) == []
    assert len(caplog.records) == 1 and caplog.records[0].exc_info is not None
    monkeypatch.undo()
    caplog.clear()
    with caplog.at_level("WARNING", logger="assay.server.worker"):
        assert await worker._claim(1) == []
    assert [r.getMessage()[:29] for r in caplog.records] == ["claiming jobs again after 0 s"]
    store.close()
