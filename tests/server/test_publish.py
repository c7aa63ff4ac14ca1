"""Publishing batch runs (`assay run --publish`) to a real server on loopback with a real SQLite
file: rows arrive once each, with their text and results; a run interrupted while publishing
continues where it stopped; a batch sent twice is stored once; bad bodies are 4xx naming the
field. The interruption comes from a loopback proxy that starts refusing requests (fault
injection)."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from assay import Client
from assay.detectors import DETECTORS
from assay.runner.output import iter_output_lines
from assay.server.process import free_port
from conftest import both_backends

from .conftest import API_KEY, AUTH, LiveServer, ServerFactory, followed_result

HERE = Path(__file__).resolve().parents[1]
WITH_TEST_JUDGES = [sys.executable, str(HERE / "assay_with_test_judges.py")]


class RefusingProxy:
    """Forwards requests to a server until `refuse` is set; then answers 503 (with
    `retry-after: 0`, so the client's retries give up at once)."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.refuse_after: int | None = None
        self.forwarded_publishes = 0
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                # Rows sent; not the run's empty check of key and application before scoring.
                publishing = self.path.endswith("/detections") and bool(body)
                limit = proxy.refuse_after
                if publishing and limit is not None and proxy.forwarded_publishes >= limit:
                    self._answer(503, b'{"message": "down", "status": 503}', {"retry-after": "0"})
                    return
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                response = httpx.post(proxy.target + self.path, content=body, headers=headers)
                proxy.forwarded_publishes += publishing
                self._answer(response.status_code, response.content, {})

            def _answer(self, status: int, body: bytes, headers: dict[str, str]) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                with contextlib.suppress(OSError):
                    self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


@contextlib.contextmanager
def running_proxy(target: str) -> Iterator[RefusingProxy]:
    """A `RefusingProxy` to `target`, serving until the block ends (it forwards the status and
    body of each answer, not its headers)."""
    running = RefusingProxy(target)
    thread = threading.Thread(target=running.server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield running
    finally:
        running.server.shutdown()
        running.server.server_close()
        thread.join(timeout=5)


@pytest.fixture
def proxy(live_server: LiveServer) -> Iterator[RefusingProxy]:
    with running_proxy(live_server.url) as running:
        yield running


def write_rows(path: Path, count: int) -> Path:
    rows = [
        {
            "id": f"q{n}",
            "user_query": f"What is product {n}?",
            "context": [f"Product {n} is a kettle."],
            "generated_text": f"Product {n} is a kettle that boils water{'!' * (n % 5)}",
        }
        for n in range(1, count + 1)
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def run_publish(
    data: Path, url: str, *extra: str, log: Path | None = None, judge: str | None = "light"
) -> Any:
    import subprocess

    env = {**os.environ, "ASSAY_API_KEY": API_KEY}
    if log is not None:
        env["ASSAY_TEST_JUDGE_LOG"] = str(log)
    return subprocess.run(
        [
            *WITH_TEST_JUDGES, "run", str(data), *(["--judge", judge] if judge else []),
            "--publish",
            "--base-url", url, "--application-name", "nightly", "--model-name", "m1",
            "--publish-batch-size", "5", *extra,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )  # fmt: skip


def stored_items(server: LiveServer) -> list[dict[str, Any]]:
    page = server.get("/v1/applications/nightly/detections", params={"limit": 500}).json()
    return list(page["items"])


def test_a_published_run_shows_each_row_once_with_its_text_and_results(
    live_server: LiveServer, tmp_path: Path
) -> None:
    data = write_rows(tmp_path / "rows.jsonl", 12)

    result = run_publish(data, live_server.url)

    assert result.returncode == 0, result.stderr
    assert f"published 12 rows to {live_server.url} (application nightly, model m1)" in (
        result.stdout
    )
    [app] = [a for a in live_server.get("/v1/applications").json() if a["name"] == "nightly"]
    assert app["items"] == 12 and app["detections"] == 24 and app["models"] == ["m1"]
    lines = {line["id"]: line for line in iter_output_lines(tmp_path / "rows.scored.jsonl")}
    by_text = {line["generated_text"]: line for line in lines.values()}
    for stored in stored_items(live_server):
        line = by_text[stored["generated_text"]]
        assert stored["user_query"] == line["user_query"]
        assert stored["context"] == line["context"]
        assert stored["result"] == line[stored["detector"]]


def test_a_run_interrupted_while_publishing_continues_and_stores_nothing_twice(
    live_server: LiveServer, proxy: RefusingProxy, tmp_path: Path
) -> None:
    data = write_rows(tmp_path / "rows.jsonl", 12)
    log = tmp_path / "judged.txt"
    proxy.refuse_after = 1  # the first batch of 5 gets through, then the server is "down"

    stopped = run_publish(data, proxy.url, log=log)

    assert stopped.returncode == 1
    [error] = [line for line in stopped.stderr.splitlines() if line.startswith("error: ")]
    assert "publishing stopped after output row 5 (5 rows sent this time)" in error
    assert "run the same command again" in error
    assert len(stored_items(live_server)) == 2 * 5
    judged = len(log.read_text().splitlines())
    # The rest must go where the first rows went: another server is refused.
    elsewhere = run_publish(data, live_server.url, log=log)
    assert elsewhere.returncode == 2
    assert f"--publish: this run already sent 5 rows to base_url={proxy.url}," in elsewhere.stderr

    proxy.refuse_after = None
    resumed = run_publish(data, proxy.url, log=log)

    assert resumed.returncode == 0, resumed.stderr
    assert "all 12 rows are scored; finishing the run" in resumed.stderr
    assert "published 7 rows" in resumed.stdout and "continuing after row 5" in resumed.stdout
    assert len(log.read_text().splitlines()) == judged  # nothing was scored again
    stored = stored_items(live_server)
    assert len(stored) == 2 * 12
    assert len({(s["generated_text"], s["detector"]) for s in stored}) == 2 * 12
    again = run_publish(data, proxy.url)
    assert again.returncode == 0 and "already holds this run" in again.stderr
    assert len(stored_items(live_server)) == 2 * 12


def test_a_run_scored_without_publish_is_published_later_without_scoring_again(
    live_server: LiveServer, tmp_path: Path
) -> None:
    import subprocess

    data = write_rows(tmp_path / "rows.jsonl", 7)
    log = tmp_path / "judged.txt"
    scored = subprocess.run(
        [*WITH_TEST_JUDGES, "run", str(data), "--judge", "light"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "ASSAY_TEST_JUDGE_LOG": str(log)},
    )
    assert scored.returncode == 0, scored.stderr
    judged = len(log.read_text().splitlines())
    # --retry-failed with --publish is refused with the way to do it.
    both = run_publish(data, live_server.url, "--retry-failed")
    assert both.returncode == 2 and "run the same command with --publish instead" in both.stderr

    published = run_publish(data, live_server.url, log=log)

    assert published.returncode == 0, published.stderr
    assert "published 7 rows" in published.stdout
    assert len(log.read_text().splitlines()) == judged  # nothing was scored again
    assert len(stored_items(live_server)) == 2 * 7
    # Now the output holds the published run: the same command finds it complete.
    again = run_publish(data, live_server.url, log=log)
    assert again.returncode == 0 and "already holds this run" in again.stderr
    assert len(stored_items(live_server)) == 2 * 7


def test_a_wrong_server_url_is_corrected_without_scoring_again(
    live_server: LiveServer, proxy: RefusingProxy, tmp_path: Path
) -> None:
    data = write_rows(tmp_path / "rows.jsonl", 6)
    log = tmp_path / "judged.txt"
    # Where nothing listens, the run stops before scoring (it scored every row first).
    nobody = run_publish(data, "http://127.0.0.1:9", log=log)
    assert nobody.returncode == 2
    assert "error: --base-url: nothing answers at http://127.0.0.1:9" in nobody.stderr
    assert not log.exists() or not log.read_text().strip()

    # A server that answers the check, then fails the rows: scored, nothing sent.
    proxy.refuse_after = 0
    wrong = run_publish(data, proxy.url, log=log)
    assert wrong.returncode == 1
    assert "error: publishing stopped before any row was sent: " in wrong.stderr
    judged = len(log.read_text().splitlines())

    # Nothing was sent, so the run may go to the right server now.
    right = run_publish(data, live_server.url, log=log)
    assert right.returncode == 0, right.stderr
    assert "published 6 rows" in right.stdout
    assert len(log.read_text().splitlines()) == judged  # scored once
    assert len(stored_items(live_server)) == 2 * 6


def test_a_batch_above_the_server_s_limit_is_sent_in_parts(
    make_server: ServerFactory, tmp_path: Path
) -> None:
    # The server's 413 came only once the whole run was scored; the server says its limit on
    # every answer, the check before scoring included.
    server = make_server(max_batch_items=3)
    data = write_rows(tmp_path / "rows.jsonl", 7)

    done = run_publish(data, server.url)  # in batches of 5

    assert done.returncode == 0, done.stderr
    assert "published 7 rows" in done.stdout
    assert len(stored_items(server)) == 2 * 7  # two detectors a row, each stored once


def test_a_batch_the_server_finds_too_large_says_to_lower_the_batch_size(
    make_server: ServerFactory, tmp_path: Path
) -> None:
    # Where the limit is not said (an older server, a proxy that drops the header), the 413
    # stands. "Run the same command again" sent the same 5-item batch into the same 413.
    server = make_server(max_batch_items=3)
    data = write_rows(tmp_path / "rows.jsonl", 6)

    with running_proxy(server.url) as proxy:
        refused = run_publish(data, proxy.url)
        smaller = run_publish(data, proxy.url, "--publish-batch-size", "3")

    assert refused.returncode == 1
    assert "items: 5 items; the limit is 3" in refused.stderr
    assert "again with --publish-batch-size below 5" in refused.stderr
    assert smaller.returncode == 0, smaller.stderr
    assert "published 6 rows" in smaller.stdout


def published_item(key: str, detector: str = "output_relevance") -> dict[str, Any]:
    """An item with a result the detector could give (any result for an unknown detector)."""
    result = followed_result(detector) if detector in DETECTORS else {"score": 1.0}
    # With the inputs its detector reads: without them no detector could have given it.
    inputs = {"user_query": f"question {key}", "context": [f"document {key}"]}
    return {"key": key, **inputs, "generated_text": f"answer {key}", "results": {detector: result}}


def edited_item(probability: float | None = None, score: float | None = None) -> dict[str, Any]:
    """A published item whose first probability or whose score is set by hand."""
    item = published_item("1")
    result = item["results"]["output_relevance"]
    if probability is not None:
        result["instructions_list"][0]["follow_probability"] = probability
    if score is not None:
        result["score"] = score
    return item


def one_result(result: Any, detector: str = "output_relevance") -> dict[str, Any]:
    """A publish body of one item holding `result` as its only result."""
    item = {"key": "1", "user_query": "q", "generated_text": "x", "results": {detector: result}}
    return {"model_name": "m1", "run_id": "r", "items": [item]}


@both_backends
def test_a_batch_sent_twice_is_stored_once(live_server: LiveServer) -> None:
    client = Client(base_url=live_server.url, auth_header=f"Bearer {API_KEY}")
    items = [published_item("1"), published_item("2")]

    first = client.detections.publish("nightly", "m1", "run-a", items)
    second = client.detections.publish("nightly", "m1", "run-a", items)
    other_run = client.detections.publish("nightly", "m1", "run-b", items[:1])
    client.close()

    assert first == {"stored": 2, "already_stored": 0}
    assert second == {"stored": 0, "already_stored": 2}
    assert other_run == {"stored": 1, "already_stored": 0}  # another night, another row
    assert len(stored_items(live_server)) == 3


@both_backends
def test_one_run_published_to_two_applications_or_models_is_stored_in_each(
    make_server: ServerFactory,
) -> None:
    server = make_server(scoped_keys={"shop-key": frozenset({"shop"})})
    body = {"model_name": "m1", "run_id": "nightly-1", "items": [published_item("row-1")]}

    def publish(application: str, model: str = "m1", key: str = API_KEY) -> Any:
        response = server.post(
            {**body, "model_name": model},
            path=f"/v1/applications/{application}/detections",
            headers={"Authorization": f"Bearer {key}"},
        )
        assert response.status_code == 200, response.text
        return response.json()

    assert publish("bank") == {"stored": 1, "already_stored": 0}
    assert publish("bank") == {"stored": 0, "already_stored": 1}
    assert publish("bank", model="m2") == {"stored": 1, "already_stored": 0}
    # Another application's rows are neither skipped nor hinted at, even to a key scoped
    # away from it.
    assert publish("shop", key="shop-key") == {"stored": 1, "already_stored": 0}
    for application, count in (("bank", 2), ("shop", 1)):
        page = server.get(f"/v1/applications/{application}/detections").json()
        assert page["total"] == count


@pytest.mark.parametrize(
    ("path", "body", "status", "message"),
    [
        (
            # Results Assay could never give were stored and shown on the dashboard.
            "/v1/applications/nightly/detections",
            one_result(
                {
                    "instructions_list": [
                        {
                            "explanation": "",
                            "follow_probability": 0.9,
                            "instruction": "Made-up instruction",
                            "label": True,
                        }
                    ],
                    "score": 1.0,
                }
            ),
            422,
            "items[0].results.output_relevance.instructions_list: must be the 4 instructions of "
            "output_relevance, in order",
        ),
        (
            "/v1/applications/nightly/detections",
            {"model_name": "m1", "run_id": "r", "items": [edited_item(probability=0.01)]},
            422,
            "items[0].results.output_relevance.instructions_list[0].label: true with "
            "follow_probability 0.01",
        ),
        (
            "/v1/applications/nightly/detections",
            {"model_name": "m1", "run_id": "r", "items": [edited_item(score=0.5)]},
            422,
            "items[0].results.output_relevance.score: 0.5, where its labels give 1.0",
        ),
        (
            "/v1/applications/nightly/detections",
            {
                "model_name": "m1",
                "run_id": "r",
                "items": [{**published_item("1"), "generated_text": " "}],
            },
            422,
            "items[0].generated_text: must not be empty",
        ),
        (
            # A result is stored exactly as Assay writes it: "1" is not converted to a score.
            "/v1/applications/nightly/detections",
            one_result({"instructions_list": [], "score": "1"}),
            422,
            "items[0].results.output_relevance.score: must be a valid number",
        ),
        (
            # A misspelt key is named, not dropped in silence.
            "/v1/applications/nightly/detections",
            one_result({"instructions_list": [], "score": 1.0, "explanations": []}),
            422,
            "items[0].results.output_relevance.explanations: Extra inputs are not permitted",
        ),
        (
            "/v1/applications/nightly/detections",
            {"model_name": "m1", "run_id": "r", "items": [published_item("1", "toxicity")]},
            422,
            "items[0].results.toxicity: unknown detector",
        ),
        (
            "/v1/applications/nightly/detections",
            one_result({"score": 1}, detector="nope"),
            422,
            "items[0].results.nope: unknown detector",
        ),
        (
            "/v1/applications/nightly/detections",
            one_result({"error": True}),
            422,
            "items[0].results.output_relevance.kind: is required",
        ),
        (
            # Stored, though no detector gives a relevance result without a question.
            "/v1/applications/nightly/detections",
            {
                "model_name": "m1",
                "run_id": "r",
                "items": [{**published_item("1"), "user_query": " "}],
            },
            422,
            "items[0].user_query: missing or empty, but results.output_relevance needs it",
        ),
        (
            "/v1/applications/nightly/detections",
            {
                "model_name": "m1",
                "run_id": "r",
                "items": [{**published_item("1", "completeness"), "context": []}],
            },
            422,
            "items[0].context: missing or empty, but results.completeness needs it",
        ),
        (
            # JSON's words: it said "must be True".
            "/v1/applications/nightly/detections",
            one_result({"error": False, "kind": "timeout", "message": "slow"}),
            422,
            "items[0].results.output_relevance.error: must be true",
        ),
        (
            "/v1/applications/nightly/detections",
            {"model_name": "bad name", "run_id": "r", "items": [published_item("1")]},
            422,
            "model_name: may hold only",
        ),
        (
            "/v1/applications/nightly/detections",
            {"model_name": "bad name", "run_id": "r", "items": [published_item("1")]},
            422,
            "model_name",
        ),
        (
            "/v1/applications/nightly/detections",
            {"model_name": "m1", "run_id": "r", "items": [{"key": "1", "results": {}}]},
            422,
            "items[0].generated_text",
        ),
        (
            "/v1/applications/nightly/detections",
            one_result({}),
            422,
            "items[0].results.output_relevance.instructions_list: is required",
        ),
        (
            "/v1/applications/bad%20app/detections",
            {"model_name": "m1", "run_id": "r", "items": [published_item("1")]},
            422,
            "application_name",
        ),
        (
            "/v1/applications/nightly/detections",
            {
                "model_name": "m1",
                "run_id": "r",
                "items": [published_item(str(n)) for n in range(3)],
            },
            413,
            "items: 3 items; the limit is 2",
        ),
        (
            # The server's text limit holds for publishing as for /v2/detect (it was a 422 from
            # the schema's own bound, and the server's lower max_text_chars was not applied).
            "/v1/applications/nightly/detections",
            {
                "model_name": "m1",
                "run_id": "r",
                "items": [{**published_item("1"), "context": ["c" * 600, "d" * 600]}],
            },
            413,
            "items[0].context: 1200 characters in total; the limit is 1000",
        ),
    ],
    ids=[
        "made-up-instruction",
        "label-against-probability",
        "score-against-labels",
        "blank-text",
        "score-as-text",
        "misspelt-key",
        "unknown-detector",
        "unknown-detector-any-shape",
        "error-object-missing-fields",
        "result-without-its-question",
        "result-without-its-context",
        "error-flag-false",
        "bad-model-message",
        "bad-model",
        "missing-text",
        "bad-result",
        "bad-application",
        "too-many",
        "too-long",
    ],
)
def test_a_bad_publish_body_is_a_4xx_naming_the_field(
    make_server: ServerFactory, path: str, body: dict[str, Any], status: int, message: str
) -> None:
    server = make_server(max_batch_items=2, max_text_chars=1000)

    response = server.post(body, path=path)

    assert response.status_code == status
    assert message in response.json()["message"]


def test_an_empty_publish_body_says_what_the_route_takes(live_server: LiveServer) -> None:
    # It asked for "a JSON array of request items", which this route refuses.
    response = httpx.post(
        live_server.url + "/v1/applications/nightly/detections",
        content=b"",
        headers={**AUTH, "Content-Type": "application/json"},
    )
    assert response.status_code == 400
    assert response.json()["message"] == (
        "body is empty; send a JSON object with model_name and items"
    )


def test_a_lone_surrogate_in_a_published_text_is_named(live_server: LiveServer) -> None:
    body = {"model_name": "m1", "run_id": "r", "items": [published_item("\ud800")]}
    response = httpx.post(
        live_server.url + "/v1/applications/nightly/detections",
        content=json.dumps(body).encode("ascii"),  # JSON's \ud800 escape, as a client sends it
        headers={**AUTH, "Content-Type": "application/json"},
        timeout=60,
    )
    assert response.status_code == 422
    assert response.json()["message"].startswith("items[0].key: ")
    assert "U+D800" in response.json()["message"]


def test_a_scoped_key_publishes_only_to_its_applications(make_server: ServerFactory) -> None:
    server = make_server(scoped_keys={"shop-key": frozenset({"shop"})})
    body = {"model_name": "m1", "run_id": "r", "items": [published_item("1")]}
    headers = {"Authorization": "Bearer shop-key"}

    mine = server.post(body, path="/v1/applications/shop/detections", headers=headers)
    other = server.post(body, path="/v1/applications/nightly/detections", headers=headers)

    assert mine.status_code == 200
    assert other.status_code == 404


def test_a_key_the_server_refuses_stops_the_run_before_scoring(
    live_server: LiveServer, tmp_path: Path
) -> None:
    data = write_rows(tmp_path / "rows.jsonl", 3)
    log = tmp_path / "judged.txt"

    result = run_publish(data, live_server.url, "--api-key", "not-a-key", log=log)

    assert result.returncode == 2
    error = result.stderr.strip().splitlines()[-1]
    assert error.startswith(
        f"error: --api-key: the server at {live_server.url} refused the key given (HTTP 401: "
    )
    assert error.endswith(
        "nothing was scored: pass a key it accepts with --api-key or set $ASSAY_API_KEY"
    )
    assert not log.exists()
    assert not (tmp_path / "rows.scored.jsonl").exists()


def test_a_key_that_may_not_publish_to_the_application_stops_the_run_before_scoring(
    make_server: ServerFactory, tmp_path: Path
) -> None:
    # It scored every row, then failed to publish and advised running the same command again.
    server = make_server(scoped_keys={"shop-key": frozenset({"shop"})})
    data = write_rows(tmp_path / "rows.jsonl", 3)
    log = tmp_path / "judged.txt"

    result = run_publish(data, server.url, "--api-key", "shop-key", log=log)

    assert result.returncode == 2, result.stderr
    error = result.stderr.strip().splitlines()[-1]
    assert error.startswith(
        f"error: --application-name: the server at {server.url} will not store detections "
        "under 'nightly' (HTTP 404: application_name: no application 'nightly' for this API key)"
    )
    assert not log.exists()
    assert not (tmp_path / "rows.scored.jsonl").exists()
    allowed = run_publish(data, server.url, "--api-key", "shop-key", "--application-name", "shop")
    assert allowed.returncode == 0, allowed.stderr


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--application-name", ""], "--application-name: is required with --publish"),
        (["--metric", "llm.ood_detection"], "--publish: publishes detector results"),
        (["--base-url", "ftp://x"], "--base-url: must be an http:// or https:// URL"),
        (["--base-url", "http://127.0.0.1:99999"], "--base-url: 'http://127.0.0.1:99999' has port"),
        (["--base-url", "http://[::1"], "--base-url: 'http://[::1' is not a valid URL"),
    ],
)
def test_bad_publish_flags_exit_2_before_scoring(
    tmp_path: Path, extra: list[str], message: str
) -> None:
    data = write_rows(tmp_path / "rows.jsonl", 2)

    result = run_publish(data, "http://127.0.0.1:9", *extra, judge=None)

    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith(f"error: {message}")
    assert not (tmp_path / "rows.scored.jsonl").exists()


def test_a_key_sent_twice_in_one_publish_is_named_with_both_items(live_server: LiveServer) -> None:
    items = [published_item("1"), published_item("2"), published_item("1")]
    body = {"model_name": "m1", "run_id": "r", "items": items}
    answer = live_server.post(body, path="/v1/applications/shop/detections")
    assert answer.status_code == 422
    assert answer.json()["message"] == (
        "items[2].key: '1' is also the key of items[0]; keys must differ within one request"
    )


@both_backends
def test_a_nul_character_is_refused_by_every_route_that_could_store_it(
    live_server: LiveServer,
) -> None:
    # PostgreSQL cannot store U+0000 (it answered 500, and an async job was retried and lost):
    # every backend refuses it up front with a 422 naming the field.
    text = "Shakespeare\u0000 wrote it."
    detect = {"user_query": "Who wrote Hamlet?", "generated_text": text}
    detect["config"] = {"output_relevance": {}}
    stored = {"publish": True, "application_name": "nul", "model_name": "m"}
    for extra in ({}, stored, {**stored, "async_mode": True}):
        response = live_server.post([{**detect, **extra}])
        assert response.status_code == 422, response.text
        assert response.json()["message"].startswith("[0].generated_text: holds a NUL character")
    item = {**published_item("1"), "generated_text": text}
    body = {"model_name": "m1", "run_id": "r", "items": [item]}
    response = live_server.post(body, path="/v1/applications/nul/detections")
    assert response.status_code == 422, response.text
    assert "items[0].generated_text" in response.json()["message"]
    assert "U+0000" in response.json()["message"]
    assert live_server.get("/v1/applications").json() == []  # nothing stored, no job queued


@both_backends
def test_a_nul_character_in_a_url_is_a_422_on_every_backend(live_server: LiveServer) -> None:
    # PostgreSQL cannot compare against U+0000 (a job id or a model filter holding one answered
    # 500 there, and 404 or 200 on SQLite): every route refuses it the same way.
    for path, name in (
        ("/v1/jobs/a%00b", "job_id"),
        ("/v1/applications/shop/detections?model=%00", "model"),
        ("/v1/applications/shop/metrics?detector=output_relevance&model=m%00", "model"),
        ("/v1/applications/sh%00op/detections", "name"),
    ):
        response = live_server.get(path)
        assert response.status_code == 422, (path, response.text)
        assert response.json()["message"] == f"{name}: holds a NUL character (U+0000); remove it"
