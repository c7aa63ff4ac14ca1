"""Client, AsyncClient, Detect and detect(): in-process on the embedded judge, and remote against
a real loopback HTTP server that injects faults."""

from __future__ import annotations

import asyncio
import copy
import gc
import inspect
import json
import logging
import pickle
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

import assay
from assay import (
    APIConnectionError,
    APIError,
    APITimeoutError,
    AssayError,
    AsyncClient,
    AuthenticationError,
    BadRequestError,
    Client,
    Detect,
    DetectorFailed,
    DetectResponseItem,
    DetectResult,
    InternalServerError,
    RateLimitError,
    RequestValidationError,
    UnprocessableEntityError,
)
from assay._sync import load_once, run_sync
from assay.judges.embedded.embedding_cache import shared_encoder
from conftest import (
    CannedResponse,
    OverlapJudge,
    StubServer,
    assert_relevance_contract,
    mean_follow_probability,
)

pytestmark = pytest.mark.usefixtures("no_server_env")

QUERY = "What is your return policy?"
ON_TOPIC = "Our return policy allows returns within 30 days of purchase with a receipt."
OFF_TOPIC = "The Eiffel Tower is one of the most visited monuments in the world."


def relevance_item(generated_text: str = ON_TOPIC, **extra: Any) -> dict[str, Any]:
    item: dict[str, Any] = {
        "user_query": QUERY,
        "generated_text": generated_text,
        "config": {"output_relevance": {"detector_name": "default", "explain": True}},
    }
    item.update(extra)
    return item


# --- DetectResponseItem -------------------------------------------------------------------------


def test_response_item_is_a_json_ready_dict_with_attribute_access() -> None:
    result = {"instructions_list": [], "score": 1.0}
    item = DetectResponseItem({"output_relevance": result})
    assert isinstance(item, dict)
    assert item.output_relevance is item["output_relevance"] is result
    assert json.loads(json.dumps(item)) == {"output_relevance": result}
    assert json.loads(json.dumps([item])) == [{"output_relevance": result}]
    assert "output_relevance" in dir(item)


def test_response_item_missing_attribute_raises_attribute_error() -> None:
    item = DetectResponseItem({"output_relevance": {"score": 1.0}})
    with pytest.raises(AttributeError, match="completeness"):
        _ = item.completeness
    assert not hasattr(item, "completeness")
    assert getattr(item, "completeness", None) is None


def test_response_item_survives_copy_and_pickle() -> None:
    item = DetectResponseItem({"output_relevance": {"score": 0.5}})
    for clone in (copy.deepcopy(item), pickle.loads(pickle.dumps(item))):
        assert type(clone) is DetectResponseItem
        assert clone == item
        assert clone.output_relevance == {"score": 0.5}


# --- in-process on the embedded judge -----------------------------------------------------------


async def test_sync_and_async_clients_agree_in_process() -> None:
    body = [relevance_item(ON_TOPIC), relevance_item(OFF_TOPIC)]
    sync_response = Client().inference.detect(body=copy.deepcopy(body))
    async with AsyncClient() as client:
        async_response = await client.inference.detect(body=copy.deepcopy(body))
    assert sync_response == async_response
    assert all(isinstance(item, DetectResponseItem) for item in sync_response)
    assert len(sync_response) == 2
    for item in sync_response:
        assert list(item) == ["output_relevance"]
        assert_relevance_contract(item.output_relevance)
        assert all(entry["explanation"] for entry in item.output_relevance["instructions_list"])
    on_topic, off_topic = (item.output_relevance for item in sync_response)
    assert mean_follow_probability(on_topic) > mean_follow_probability(off_topic)


async def test_sync_client_called_inside_a_running_event_loop() -> None:
    # A notebook cell or a coroutine calling sync code: asyncio.run would refuse to nest here.
    response = Client().inference.detect(body=[relevance_item()])
    async with AsyncClient() as client:
        expected = await client.inference.detect(body=[relevance_item()])
    assert response == expected
    assert_relevance_contract(response[0].output_relevance)


def test_explain_false_leaves_explanations_empty() -> None:
    item = relevance_item()
    item["config"]["output_relevance"]["explain"] = False
    result = Client().inference.detect(body=[item])[0].output_relevance
    assert_relevance_contract(result)
    assert [entry["explanation"] for entry in result["instructions_list"]] == [""] * 4


def test_single_item_body_is_accepted_as_a_list_of_one() -> None:
    response = Client().inference.detect(body=relevance_item())
    assert len(response) == 1
    assert_relevance_contract(response[0].output_relevance)


def test_detect_function_scores_one_response() -> None:
    result = assay.detect(ON_TOPIC, user_query=QUERY, detectors="output_relevance")
    assert list(result) == ["output_relevance"]
    assert_relevance_contract(result.output_relevance)
    # Explained by default, as every other way in; explain=False leaves explanations empty.
    assert all(entry["explanation"] for entry in result.output_relevance["instructions_list"])
    quiet = assay.detect(ON_TOPIC, user_query=QUERY, explain=False)
    assert {entry["explanation"] for entry in quiet.output_relevance["instructions_list"]} == {""}
    off_topic = assay.detect(OFF_TOPIC, user_query=QUERY)
    # By default every detector whose inputs are given, as assay run and assert_detect do.
    both = assay.detect(ON_TOPIC, user_query=QUERY, context=["A context document."])
    assert list(both) == ["output_relevance", "completeness"]
    assert list(assay.detect(ON_TOPIC, context=["A context document."])) == ["completeness"]
    assert mean_follow_probability(off_topic["output_relevance"]) < mean_follow_probability(
        result["output_relevance"]
    )


def test_detect_function_names_the_missing_argument() -> None:
    with pytest.raises(RequestValidationError) as caught:
        assay.detect(ON_TOPIC)
    assert caught.value.field == "detectors" and "no detector has the inputs" in str(caught.value)
    # An empty answer is named first, with or without a query ("no detector" misled).
    for arguments in (("",), (" ", QUERY)):
        with pytest.raises(RequestValidationError) as caught:
            assay.detect(*arguments)
        assert (caught.value.field, caught.value.message) == ("generated_text", "must not be empty")
    with pytest.raises(RequestValidationError) as caught:
        assay.detect(ON_TOPIC, detectors="output_relevance")
    assert caught.value.field == "user_query"
    for detectors in ((), "toxicity"):
        with pytest.raises(RequestValidationError) as caught:
            assay.detect(ON_TOPIC, user_query=QUERY, detectors=detectors)
        assert caught.value.field == "detectors" and "known detectors" in caught.value.message


# --- run_sync -----------------------------------------------------------------------------------


async def _thread_and_loop() -> tuple[int, asyncio.AbstractEventLoop]:
    return threading.get_ident(), asyncio.get_running_loop()


def test_run_sync_without_a_loop_runs_in_this_thread() -> None:
    thread_id, _ = run_sync(_thread_and_loop())
    assert thread_id == threading.get_ident()


async def test_run_sync_inside_a_loop_uses_another_thread_and_loop() -> None:
    thread_id, loop = run_sync(_thread_and_loop())
    assert thread_id != threading.get_ident()
    assert loop is not asyncio.get_running_loop()


async def test_run_sync_propagates_exceptions() -> None:
    async def fail() -> None:
        raise KeyError("boom")

    with pytest.raises(KeyError, match="boom"):
        run_sync(fail())


# --- validation and failures (no model needed) --------------------------------------------------

INVALID_ITEMS = [
    pytest.param({"generated_text": None}, "[0].generated_text", id="missing-generated-text"),
    pytest.param({"config": {"nope": {}}}, "[0].config.nope", id="unknown-detector"),
    pytest.param({"must_compute": "sometimes"}, "[0].must_compute", id="bad-must-compute"),
    pytest.param({"publish": "yes"}, "[0].publish", id="publish-not-bool"),
    pytest.param({"user_query": None}, "[0].user_query", id="missing-required-input"),
]


def _invalid(changes: dict[str, Any]) -> dict[str, Any]:
    item = relevance_item()
    for key, value in changes.items():
        if value is None:
            del item[key]
        else:
            item[key] = value
    return item


@pytest.mark.parametrize(("changes", "field"), INVALID_ITEMS)
def test_sync_validation_errors_name_the_field(
    changes: dict[str, Any], field: str, overlap_judge: OverlapJudge
) -> None:
    with pytest.raises(RequestValidationError) as caught:
        Client(judge="overlap").inference.detect(body=[_invalid(changes)])
    assert caught.value.field == field
    assert caught.value.message
    assert overlap_judge.calls == 0


@pytest.mark.parametrize(("changes", "field"), INVALID_ITEMS)
async def test_async_validation_errors_name_the_field(
    changes: dict[str, Any], field: str, overlap_judge: OverlapJudge
) -> None:
    async with AsyncClient(judge="overlap") as client:
        with pytest.raises(RequestValidationError) as caught:
            await client.inference.detect(body=[_invalid(changes)])
    assert caught.value.field == field
    assert overlap_judge.calls == 0


def test_a_bad_second_item_is_named_by_its_index(overlap_judge: OverlapJudge) -> None:
    with pytest.raises(RequestValidationError) as caught:
        Client(judge="overlap").inference.detect(
            body=[relevance_item(), _invalid({"generated_text": None})]
        )
    assert caught.value.field == "[1].generated_text"
    assert overlap_judge.calls == 0


@pytest.mark.parametrize("body", ["not a list", 42, []])
def test_body_must_be_an_array_of_items(body: Any) -> None:
    with pytest.raises(RequestValidationError) as caught:
        Client(judge="overlap").inference.detect(body=body)
    assert caught.value.field == "body"


def test_judge_argument_selects_the_backend(overlap_judge: OverlapJudge) -> None:
    result = Client(judge="overlap").inference.detect(body=[relevance_item()])[0].output_relevance
    assert overlap_judge.calls == 1
    assert result["instructions_list"][0]["explanation"].startswith("overlap")
    assert_relevance_contract(result)


def test_detector_failure_propagates_under_all_or_none(failing_judge: str) -> None:
    with pytest.raises(DetectorFailed) as caught:
        Client(judge=failing_judge).inference.detect(body=[relevance_item()])
    assert caught.value.detector == "output_relevance"
    assert caught.value.failure.kind == "timeout"


def test_a_server_answer_that_a_detector_failed_is_not_sent_again(
    stub_server: StubServer,
) -> None:
    # The server retried its judge before answering: each retry judged the item again (a
    # timed-out LLM judge, minutes each time).
    failure = {"item": 0, "detector": "output_relevance", "kind": "timeout", "message": "slow"}
    stub_server.reply(
        *[CannedResponse(503, {"message": "detector failed", "failure": failure})] * 3
    )
    with pytest.raises(DetectorFailed) as caught:
        Client(base_url=stub_server.url, max_retries=2).inference.detect(body=[relevance_item()])
    assert caught.value.failure.kind == "timeout"
    assert len(stub_server.requests) == 1
    # A plain 503 (no detector named) is still retried.
    stub_server.reply(*[CannedResponse(503, {"message": "busy"})] * 2, CannedResponse(200, CANNED))
    [item] = Client(base_url=stub_server.url, max_retries=2).inference.detect(
        body=[relevance_item()]
    )
    assert item.output_relevance is not None
    assert len(stub_server.requests) == 4


async def test_ignore_failures_reports_an_explicit_error(failing_judge: str) -> None:
    async with AsyncClient(judge=failing_judge) as client:
        response = await client.inference.detect(
            body=[relevance_item(must_compute="ignore_failures")]
        )
    assert response[0].output_relevance == {
        "error": True,
        "kind": "timeout",
        "message": "test judge always times out",
    }


def test_publish_in_process_returns_results_and_warns_once(
    overlap_judge: OverlapJudge, caplog: pytest.LogCaptureFixture
) -> None:
    client = Client(judge="overlap")
    published = relevance_item(publish=True, application_name="app", model_name="model")
    background = {**published, "async_mode": True}
    with caplog.at_level(logging.WARNING, logger="assay.client"):
        first = client.inference.detect(body=[published])
        second = client.inference.detect(body=[background])
    assert_relevance_contract(first[0].output_relevance)
    # An async item answers as a server would: an acknowledgement with its job's id.
    assert set(second[0]) == {"message", "status", "job_id"}
    job = client.jobs.retrieve(second[0].job_id)
    assert job.state == "done"
    assert_relevance_contract(job.result.output_relevance)
    warnings = [r for r in caplog.records if r.name == "assay.client" and r.levelname == "WARNING"]
    assert len(warnings) == 1
    assert "base_url" in warnings[0].getMessage()


def test_publish_without_names_is_rejected_in_process(overlap_judge: OverlapJudge) -> None:
    with pytest.raises(RequestValidationError) as caught:
        Client(judge="overlap").inference.detect(body=[relevance_item(publish=True)])
    assert caught.value.field == "[0].application_name"


def test_async_mode_without_names_names_async_mode() -> None:
    # The decorator publishes what it queues, and the message blamed publish, never set.
    with pytest.raises(RequestValidationError, match="required when async_mode is true"):
        Detect(["user_query", "generated_text"], RELEVANCE_CONFIG, async_mode=True)


@pytest.mark.parametrize(
    ("arguments", "word"),
    [
        ({"timeout": 0}, "timeout"),
        ({"timeout": float("nan")}, "timeout"),
        ({"timeout": "x"}, "timeout must be positive seconds, got 'x'"),
        ({"max_retries": -1}, "max_retries"),
        ({"judge": "nope"}, "unknown judge 'nope'; known judges: "),
    ],
)
def test_client_rejects_bad_settings(arguments: dict[str, Any], word: str) -> None:
    with pytest.raises(ValueError, match=word):
        Client(**arguments)


def test_importing_assay_does_no_work() -> None:
    code = (
        "import sys, assay\n"
        "heavy = {'assay.client', 'httpx', 'onnxruntime', 'numpy', 'assay.judges.embedded'}\n"
        "assert not heavy & set(sys.modules), heavy & set(sys.modules)\n"
        "from assay import Client, Detect, detect\n"
        "import assay.client\n"
        "assert Client is assay.client.Client and 'onnxruntime' not in sys.modules\n"
    )
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert completed.returncode == 0, completed.stderr


def test_unknown_top_level_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = assay.no_such_name


# --- the Detect decorator -----------------------------------------------------------------------

RELEVANCE_CONFIG = {"output_relevance": {"detector_name": "default", "explain": True}}


@pytest.mark.parametrize(
    ("arguments", "word"),
    [
        ({"values_returned": []}, "values_returned"),
        ({"values_returned": ["generated_text", "answer"]}, "answer"),
        ({"values_returned": ["user_query"]}, "generated_text"),
        ({"values_returned": ["generated_text", "generated_text"]}, "twice"),
        ({"values_returned": 7}, "values_returned"),
        ({"must_compute": "sometimes"}, "must_compute"),
        ({"publish": True, "model_name": "m"}, "application_name"),
        ({"async_mode": True, "application_name": "a"}, "model_name"),
        ({"config": {}}, "config"),
        ({"config": {"nope": {}}}, "nope"),
        ({"config": {"output_relevance": True}}, "output_relevance"),
        # Checked when decorating, not on the first call after the function ran.
        ({"config": {"output_relevance": {"explian": True}}}, "config.output_relevance.explian"),
        ({"config": {"output_relevance": {"explain": "true"}}}, "output_relevance.explain"),
        ({"config": {"output_relevance": {"detector_name": "hall_v2"}}}, "detector_name"),
        ({"config": {"output_relevance": {"judge": "opneai"}}}, "unknown judge 'opneai'"),
        ({"publish": True, "application_name": "my bot", "model_name": "m"}, "application_name:"),
        ({"publish": True, "application_name": "a", "model_name": "m m"}, "model_name:"),
        # The function's answer was lost: these failed only on the first call.
        (
            {"values_returned": ["generated_text"]},
            "values_returned: does not name user_query, which the config's detectors need",
        ),
        ({"base_url": "ftp://example.org"}, "base_url: 'ftp://example.org' must start with http"),
        ({"base_url": "http://127.0.0.1:99999"}, "base_url: .*outside 1-65535"),
        # bool("false") is True: an acknowledgement came back instead of scores.
        ({"async_mode": "false"}, "async_mode must be True or False, got 'false'"),
        ({"publish": "false"}, "publish must be True or False, got 'false'"),
    ],
)
def test_detect_rejects_bad_arguments(arguments: dict[str, Any], word: str) -> None:
    settings: dict[str, Any] = {
        "values_returned": ["user_query", "generated_text"],
        "config": RELEVANCE_CONFIG,
        **arguments,
    }
    with pytest.raises(ValueError, match=word):
        Detect(**settings)


def test_detect_needs_no_api_key_in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIMON_API_KEY", raising=False)
    detect = Detect(["user_query", "generated_text"], RELEVANCE_CONFIG, api_key=None)
    assert detect.publish is False


def test_detect_sends_assay_api_key_before_aimons(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every Client sends $ASSAY_API_KEY; a leftover AIMon key must not win over it.
    monkeypatch.setenv("ASSAY_API_KEY", "assay-key")
    monkeypatch.setenv("AIMON_API_KEY", "aimon-key")
    both = Detect(["user_query", "generated_text"], RELEVANCE_CONFIG, base_url="http://127.0.0.1:9")
    assert both._client.auth_header == "Bearer assay-key"
    monkeypatch.delenv("ASSAY_API_KEY")
    aimon = Detect(
        ["user_query", "generated_text"], RELEVANCE_CONFIG, base_url="http://127.0.0.1:9"
    )
    assert aimon._client.auth_header == "Bearer aimon-key"
    given = Detect(
        ["user_query", "generated_text"],
        RELEVANCE_CONFIG,
        api_key="given",
        base_url="http://127.0.0.1:9",
    )
    assert given._client.auth_header == "Bearer given"


def test_async_mode_implies_publish_and_fills_the_item() -> None:
    detect = Detect(
        ["generated_text", "user_query"],
        RELEVANCE_CONFIG,
        async_mode=True,
        application_name="app",
        model_name="model",
        must_compute="ignore_failures",
    )
    assert detect.publish is True
    assert detect.request_item((ON_TOPIC, QUERY)) == {
        "generated_text": ON_TOPIC,
        "user_query": QUERY,
        "config": RELEVANCE_CONFIG,
        "publish": True,
        "async_mode": True,
        "must_compute": "ignore_failures",
        "application_name": "app",
        "model_name": "model",
    }


def test_an_async_results_repr_shows_its_status_once() -> None:
    sent = DetectResponseItem({"message": "Data successfully sent.", "status": 200, "job_id": "j1"})
    assert repr(DetectResult(200, sent)) == (
        "DetectResult(status=200, message='Data successfully sent.', job_id='j1')"
    )
    # A long message is cut inside its quotes (the closing quote was lost).
    long = DetectResponseItem(
        {"message": "Scored in this process (no server): " * 3, "job_id": "j"}
    )
    assert repr(DetectResult(200, long)) == (
        "DetectResult(status=200, message='Scored in this process (no server):…', job_id='j')"
    )


def test_detect_wraps_a_single_return_value(stub_server: StubServer) -> None:
    stub_server.reply(CannedResponse(200, CANNED))
    # A server's detectors are the server's to know: one may need the answer alone.
    detect = Detect("generated_text", {"any_server_detector": {}}, base_url=stub_server.url)
    assert detect.request_item((ON_TOPIC,))["generated_text"] == ON_TOPIC

    @detect
    def answer() -> str:
        return ON_TOPIC

    text, result = answer()
    assert text == ON_TOPIC and result.detect_response == CANNED[0]
    assert stub_server.requests[-1].body[0]["generated_text"] == ON_TOPIC
    # Completeness needs a context: refused when decorating, not after a call, with a server
    # too (there the decorated function ran, and its answer was lost to a 422).
    for server in (None, stub_server.url):
        with pytest.raises(RequestValidationError) as caught:
            Detect("generated_text", {"completeness": {}}, base_url=server)
        assert caught.value.field == "values_returned"
        assert "does not name context" in str(caught.value)


def test_detect_rejects_too_few_return_values() -> None:
    @Detect(["user_query", "generated_text"], RELEVANCE_CONFIG)
    def answer() -> str:
        return ON_TOPIC

    with pytest.raises(ValueError, match="returned 1 value"):
        answer()


def test_detect_decorator_returns_values_and_result() -> None:
    @Detect(["user_query", "generated_text"], RELEVANCE_CONFIG)
    def answer(query: str) -> tuple[str, str]:
        return query, ON_TOPIC

    query, text, result = answer(QUERY)
    assert (query, text) == (QUERY, ON_TOPIC)
    assert isinstance(result, DetectResult)
    assert result.status == 200
    assert result.publish_response == []
    assert result.detect_response == Client().inference.detect(body=[relevance_item()])[0]
    assert_relevance_contract(result.detect_response.output_relevance)
    assert answer.__name__ == "answer"
    score = result.detect_response.output_relevance["score"]
    for text_form in (str(result), repr(result)):
        # One short line: the scores, not the seventy lines of the full response.
        assert text_form == f"DetectResult(status=200, output_relevance={score:.4g})"


async def test_detect_decorates_async_functions() -> None:
    detect = Detect(["user_query", "generated_text"], RELEVANCE_CONFIG)

    @detect
    async def answer(query: str) -> tuple[str, str]:
        await asyncio.sleep(0)
        return query, ON_TOPIC

    assert inspect.iscoroutinefunction(answer)
    query, text, result = await answer(QUERY)
    assert (query, text) == (QUERY, ON_TOPIC)
    assert result.status == 200
    async with AsyncClient() as client:
        expected = await client.inference.detect(body=[relevance_item()])
    assert result.detect_response == expected[0]


# --- remote, against a loopback server ----------------------------------------------------------

CANNED = [{"output_relevance": {"instructions_list": [], "score": 0.75}}]


def test_remote_posts_the_array_and_forwards_authorization_verbatim(
    stub_server: StubServer,
) -> None:
    stub_server.reply(CannedResponse(200, CANNED))
    with Client(
        auth_header="Bearer  key.with_odd-chars==", base_url=stub_server.url + "/"
    ) as client:
        response = client.inference.detect(body=[relevance_item()])
    assert response == CANNED
    assert response[0].output_relevance["score"] == 0.75
    [request] = stub_server.requests
    assert (request.method, request.path) == ("POST", "/v2/detect")
    assert request.headers["authorization"] == "Bearer  key.with_odd-chars=="
    assert request.body == [relevance_item()]


def test_remote_without_auth_header_sends_none(stub_server: StubServer) -> None:
    stub_server.reply(CannedResponse(200, CANNED))
    Client(base_url=stub_server.url).inference.detect(body=[relevance_item()])
    assert "authorization" not in stub_server.requests[0].headers


def test_remote_retries_429_honouring_retry_after(stub_server: StubServer) -> None:
    stub_server.reply(
        CannedResponse(429, {"detail": "slow down"}, {"Retry-After": "0"}),
        CannedResponse(200, CANNED),
    )
    response = Client(base_url=stub_server.url).inference.detect(body=[relevance_item()])
    assert response == CANNED
    assert len(stub_server.requests) == 2


def test_remote_rate_limit_raised_once_retries_run_out(stub_server: StubServer) -> None:
    stub_server.reply(CannedResponse(429, {"detail": "slow down"}, {"Retry-After": "0"}))
    with pytest.raises(RateLimitError) as caught:
        Client(base_url=stub_server.url, max_retries=1).inference.detect(body=[relevance_item()])
    assert caught.value.status_code == 429
    assert caught.value.message == "slow down"
    assert len(stub_server.requests) == 2


def test_remote_401_is_an_authentication_error_with_the_server_message(
    stub_server: StubServer,
) -> None:
    stub_server.reply(CannedResponse(401, {"detail": "invalid API key"}))
    with pytest.raises(AuthenticationError) as caught:
        Client(auth_header="Bearer wrong", base_url=stub_server.url).inference.detect(
            body=[relevance_item()]
        )
    assert caught.value.status_code == 401
    assert caught.value.message == "invalid API key"
    assert caught.value.body == {"detail": "invalid API key"}
    assert len(stub_server.requests) == 1  # never retried


def test_remote_500_is_retried_then_raised(stub_server: StubServer) -> None:
    stub_server.reply(CannedResponse(500, {"message": "judge crashed"}, {"Retry-After": "0"}))
    with pytest.raises(InternalServerError) as caught:
        Client(base_url=stub_server.url, max_retries=2).inference.detect(body=[relevance_item()])
    assert caught.value.status_code == 500
    assert caught.value.message == "judge crashed"
    assert len(stub_server.requests) == 3


def test_remote_422_is_a_bad_request_naming_the_field(stub_server: StubServer) -> None:
    detail = [{"loc": ["body", 0, "generated_text"], "msg": "Field required"}]
    stub_server.reply(CannedResponse(422, {"detail": detail}))
    with pytest.raises(UnprocessableEntityError) as caught:
        Client(base_url=stub_server.url).inference.detect(body=[relevance_item()])
    # AIMon's SDK raises the same name; code that catches BadRequestError still catches it.
    assert isinstance(caught.value, BadRequestError)
    assert "body.0.generated_text: Field required" in caught.value.message
    assert len(stub_server.requests) == 1


def test_remote_success_that_is_not_json_is_an_api_error(stub_server: StubServer) -> None:
    stub_server.reply(CannedResponse(200, "<html>proxy login</html>"))
    with pytest.raises(APIError, match="JSON array") as caught:
        Client(base_url=stub_server.url).inference.detect(body=[relevance_item()])
    assert caught.value.body == "<html>proxy login</html>"


def test_base_url_comes_from_client_base_url_env(
    stub_server: StubServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CLIENT_BASE_URL", stub_server.url)
    stub_server.reply(CannedResponse(200, CANNED))
    client = Client()
    assert client.base_url == stub_server.url
    assert client.inference.detect(body=[relevance_item()]) == CANNED
    assert len(stub_server.requests) == 1


def test_assay_base_url_env_wins_over_client_base_url(
    stub_server: StubServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ASSAY_BASE_URL", stub_server.url)
    monkeypatch.setenv("CLIENT_BASE_URL", "http://127.0.0.1:9")
    stub_server.reply(CannedResponse(200, CANNED))
    assert Client(max_retries=0).inference.detect(body=[relevance_item()]) == CANNED


def _client_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "assay-client"}


def test_sync_remote_client_serves_several_threads_on_its_own_loop_until_closed(
    stub_server: StubServer,
) -> None:
    stub_server.reply(CannedResponse(200, CANNED))
    before = _client_threads()
    client = Client(base_url=stub_server.url)
    with ThreadPoolExecutor(max_workers=4) as pool:
        answers = list(
            pool.map(lambda _: client.inference.detect(body=[relevance_item()]), range(8))
        )
    assert answers == [CANNED] * 8 and len(stub_server.requests) == 8
    [own] = _client_threads() - before  # one loop thread serves every calling thread
    client.close()
    assert not own.is_alive()
    # Closing is not final: a later call starts the loop thread again.
    assert client.inference.detect(body=[relevance_item()]) == CANNED
    client.close()


def test_a_sync_client_never_closed_leaves_no_thread_once_collected(
    stub_server: StubServer,
) -> None:
    stub_server.reply(CannedResponse(200, CANNED))
    before = _client_threads()
    client = Client(base_url=stub_server.url)
    assert client.inference.detect(body=[relevance_item()]) == CANNED
    [own] = _client_threads() - before
    del client
    gc.collect()
    own.join(timeout=30)
    assert not own.is_alive()


async def test_async_client_remote_retries_then_succeeds(stub_server: StubServer) -> None:
    stub_server.reply(
        CannedResponse(503, {"detail": "warming up"}, {"Retry-After": "0"}),
        CannedResponse(200, CANNED),
    )
    async with AsyncClient(auth_header="Token t", base_url=stub_server.url) as client:
        response = await client.inference.detect(body=[relevance_item()])
    assert response == CANNED
    assert isinstance(response[0], DetectResponseItem)
    assert [r.headers["authorization"] for r in stub_server.requests] == ["Token t"] * 2


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def test_unreachable_server_is_a_connection_error() -> None:
    client = Client(base_url=f"http://127.0.0.1:{_closed_port()}", max_retries=0)
    with pytest.raises(APIConnectionError) as caught:
        client.inference.detect(body=[relevance_item()])
    assert caught.value.status_code is None


@pytest.mark.parametrize(
    ("url", "words"),
    [("http://127.0.0.1:99999", "has port 99999, outside 1-65535"), ("http://[::1", "not a valid")],
)
def test_a_base_url_that_cannot_be_used_is_a_connection_error_at_once(
    url: str, words: str, caplog: pytest.LogCaptureFixture
) -> None:
    # httpx reported a port out of range as a bare ExceptionGroup from its connection pool.
    async def detect_async() -> object:
        async with AsyncClient(base_url=url, max_retries=3) as client:
            return await client.inference.detect(body=[relevance_item()])

    def detect_sync() -> object:
        return Client(base_url=url, max_retries=3).inference.detect(body=[relevance_item()])

    for call in (detect_sync, lambda: asyncio.run(detect_async())):
        with caplog.at_level(logging.WARNING), pytest.raises(APIConnectionError) as caught:
            call()
        assert "could not send the request (check base_url)" in str(caught.value)
        assert words in str(caught.value)
    assert not [r for r in caplog.records if "retry" in r.getMessage()]


@pytest.mark.parametrize("bad", ["url", "line break", "non-ASCII"])
def test_a_request_that_cannot_be_sent_is_not_retried(
    bad: str, stub_server: StubServer, caplog: pytest.LogCaptureFixture
) -> None:
    if bad == "url":
        client = Client(base_url=stub_server.url.replace("http://", "ftp://"), max_retries=3)
    else:
        key = "Bearer hunter\n22" if bad == "line break" else "Bearer hunter22\u200b"
        client = Client(base_url=stub_server.url, auth_header=key, max_retries=3)
    with caplog.at_level(logging.WARNING), pytest.raises(APIConnectionError) as caught:
        client.inference.detect(body=[relevance_item()])
    assert "could not send the request" in str(caught.value)
    if bad == "url":
        assert caught.value.__cause__ is not None
    else:  # named by position; the secret is not echoed (a bare UnicodeEncodeError before)
        assert "at position" in str(caught.value) and "hunter" not in str(caught.value)
    assert not [r for r in caplog.records if "retry" in r.getMessage()]
    assert stub_server.requests == []


def test_an_auth_header_read_with_its_newline_is_trimmed(stub_server: StubServer) -> None:
    stub_server.reply(CannedResponse(200, CANNED))
    client = Client(base_url=stub_server.url, auth_header="Bearer key-one\n", max_retries=0)
    client.inference.detect(body=[relevance_item()])
    assert stub_server.requests[-1].headers["authorization"] == "Bearer key-one"


def test_slow_server_is_a_timeout_error(stub_server: StubServer) -> None:
    release = threading.Event()
    stub_server.reply(CannedResponse(200, CANNED, hold=release))
    client = Client(base_url=stub_server.url, timeout=0.2, max_retries=0)
    try:
        with pytest.raises(APITimeoutError):
            client.inference.detect(body=[relevance_item()])
    finally:
        release.set()
        client.close()


def test_detect_decorator_posts_to_a_server(stub_server: StubServer) -> None:
    stub_server.reply(CannedResponse(200, CANNED))

    @Detect(
        ["user_query", "generated_text"],
        {"any_server_detector": {}},
        api_key="k",
        publish=True,
        application_name="app",
        model_name="model",
        base_url=stub_server.url,
    )
    def answer() -> tuple[str, str]:
        return QUERY, ON_TOPIC

    *_, result = answer()
    assert result.detect_response == CANNED[0]
    [request] = stub_server.requests
    assert request.headers["authorization"] == "Bearer k"
    assert request.body == [
        {
            "user_query": QUERY,
            "generated_text": ON_TOPIC,
            "config": {"any_server_detector": {}},
            "publish": True,
            "async_mode": False,
            "must_compute": "all_or_none",
            "application_name": "app",
            "model_name": "model",
        }
    ]


async def test_async_detect_decorator_posts_to_a_server(stub_server: StubServer) -> None:
    stub_server.reply(CannedResponse(200, CANNED))
    detect = Detect(["user_query", "generated_text"], RELEVANCE_CONFIG, base_url=stub_server.url)

    @detect
    async def answer() -> tuple[str, str]:
        return QUERY, ON_TOPIC

    query, text, result = await answer()
    assert (query, text) == (QUERY, ON_TOPIC)
    assert result.detect_response == CANNED[0]
    assert stub_server.requests[0].body[0]["generated_text"] == ON_TOPIC


def test_the_key_in_assay_api_key_is_sent_unless_an_auth_header_is_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ASSAY_API_KEY", " key-one ")
    assert Client()._headers()["Authorization"] == "Bearer key-one"
    assert Client(auth_header="Basic abc")._headers()["Authorization"] == "Basic abc"
    monkeypatch.setenv("ASSAY_API_KEY", "")
    assert "Authorization" not in Client()._headers()


def test_unknown_judge_in_process_is_a_value_error_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The module-level detect() and $ASSAY_JUDGE raised a bare KeyError here.
    with pytest.raises(ValueError, match="unknown judge 'bogus'; known judges: "):
        assay.detect("Paris.", user_query="Capital of France?", judge="bogus")
    monkeypatch.setenv("ASSAY_JUDGE", "bogus")
    with Client() as client, pytest.raises(ValueError, match="unknown judge 'bogus'"):
        client.inference.detect(body=[relevance_item()])


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"generated_text": b"abc"}, "[0].generated_text", "got bytes"),
        ({"context": {"a"}}, "[0].context", "got set"),
        ({"tool_trace": [float("nan")]}, "[0].tool_trace[0]", "nan, which JSON cannot carry"),
    ],
)
def test_remote_items_json_cannot_carry_are_refused_naming_the_field(
    stub_server: StubServer, change: dict[str, Any], field: str, words: str
) -> None:
    # httpx failed on these with a bare TypeError or ValueError before anything was sent.
    client = Client(base_url=stub_server.url, max_retries=0)
    with pytest.raises(RequestValidationError) as caught:
        client.inference.detect(body=[{**relevance_item(), **change}])
    assert caught.value.field == field
    assert words in str(caught.value)
    assert stub_server.requests == []
    # In-process the same item is refused the same way (NaN and a set were scored there).
    with Client() as local, pytest.raises(RequestValidationError) as caught:
        local.inference.detect(body=[{**relevance_item(), **change}])
    assert caught.value.field == field and words in str(caught.value)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"generated_text": 5}, "[0].generated_text"),
        ({"generated_text": " "}, "[0].generated_text"),
        ({"config": None}, "[0].config"),
        ({"publish": True}, "[0].application_name"),
        # A detector's missing input too (it went out and came back as a 422).
        ({"config": {"completeness": {"detector_name": "default"}}}, "[0].context"),
    ],
)
def test_a_malformed_item_is_refused_before_it_is_sent_as_in_process(
    stub_server: StubServer, change: dict[str, Any], field: str
) -> None:
    # With a server it went out and came back as a 422 UnprocessableEntityError, so code
    # catching RequestValidationError (as in-process) stopped working once base_url was set.
    item = {**relevance_item(), **change}
    with pytest.raises(RequestValidationError) as in_process:
        Client().inference.detect(body=[item])
    with pytest.raises(RequestValidationError) as remote:
        Client(base_url=stub_server.url, max_retries=0).inference.detect(body=[item])
    assert remote.value.field == in_process.value.field == field
    assert stub_server.requests == []


def test_remote_async_client_serves_a_second_event_loop(stub_server: StubServer) -> None:
    # Its connection pool belonged to the first loop: the second asyncio.run failed with
    # "Event loop is closed".
    stub_server.reply(CannedResponse(200, CANNED))
    client = AsyncClient(base_url=stub_server.url, max_retries=0)
    for _ in range(2):
        [item] = asyncio.run(client.inference.detect(body=[relevance_item()]))
        assert item.output_relevance is not None
    asyncio.run(client.aclose())
    assert len(stub_server.requests) == 2


def test_an_event_loop_that_ends_closes_the_async_clients_pool(stub_server: StubServer) -> None:
    # Each test of pytest-asyncio has its own loop: the pool a loop opened was left open when
    # the loop ended, its keep-alive sockets reported as unclosed (ResourceWarning).
    stub_server.reply(CannedResponse(200, CANNED), CannedResponse(200, CANNED))
    client = AsyncClient(base_url=stub_server.url, max_retries=0)
    pools = []

    async def detect() -> None:
        await client.inference.detect(body=[relevance_item()])
        pools.append(client._http)

    asyncio.run(detect())
    assert pools[0] is not None and pools[0].is_closed
    asyncio.run(detect())
    assert pools[1] is not pools[0] and pools[1] is not None and pools[1].is_closed


@pytest.mark.parametrize("job_id", [None, "", 7])
def test_retrieving_a_job_without_an_id_says_so(job_id: Any, stub_server: StubServer) -> None:
    for client in (Client(), Client(base_url=stub_server.url, max_retries=0)):
        with pytest.raises(ValueError, match="job_id: must be the job_id text") as caught:
            client.jobs.retrieve(job_id)
        assert isinstance(caught.value, AssayError)  # as the TypeScript client's
    assert stub_server.requests == []


def test_closing_a_client_ends_a_call_another_thread_is_waiting_on(stub_server: StubServer) -> None:
    release = threading.Event()
    stub_server.reply(CannedResponse(200, CANNED, hold=release))
    client = Client(base_url=stub_server.url, max_retries=0)
    outcome: list[BaseException | object] = []

    def call() -> None:
        try:
            outcome.append(client.inference.detect(body=[relevance_item()]))
        except BaseException as error:  # noqa: BLE001 - the outcome is what is under test
            outcome.append(error)

    waiting = threading.Thread(target=call, daemon=True)
    waiting.start()
    try:
        for _ in range(200):  # until the request is at the stub
            if stub_server.requests:
                break
            threading.Event().wait(0.05)
        client.close()
        waiting.join(timeout=20)  # it waited forever before
        assert not waiting.is_alive()
        [error] = outcome
        assert isinstance(error, RuntimeError) and "closed while this call" in str(error)
    finally:
        release.set()


def _detect_in_child(client: Client, answers: Any) -> None:
    answers.put(client.inference.detect(body=[relevance_item()])[0].output_relevance["score"])


def test_a_client_used_in_a_forked_process_works(stub_server: StubServer) -> None:
    import multiprocessing

    stub_server.reply(CannedResponse(200, CANNED))
    client = Client(base_url=stub_server.url, max_retries=0)
    client.inference.detect(body=[relevance_item()])  # the parent's loop thread is running
    fork = multiprocessing.get_context("fork")
    answers = fork.Queue()
    child = fork.Process(target=_detect_in_child, args=(client, answers))
    child.start()
    try:
        score = answers.get(timeout=60)  # the child waited forever on the parent's loop before
    finally:
        child.join(timeout=30)
        if child.is_alive():
            child.kill()
    assert score == CANNED[0]["output_relevance"]["score"] and child.exitcode == 0
    client.close()


def test_a_loader_called_by_threads_at_once_builds_once() -> None:
    # `functools.cache` alone let two OOD rows build two encoders (the second missed the
    # shipped bank vectors, 2.5x slower) and six threads six agreement models.
    built: list[int] = []

    @load_once
    def slow_loader(name: str) -> object:
        built.append(1)
        time.sleep(0.05)  # a load takes a while, so the threads overlap it
        return object()

    with ThreadPoolExecutor(6) as pool:
        loaded = list(pool.map(lambda _: slow_loader("minilm"), range(6)))

    assert len(built) == 1
    assert all(value is loaded[0] for value in loaded)
    assert shared_encoder() is shared_encoder()


# --- arguments checked where they are given ------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"base_url": 8000}, "base_url must be text, got int 8000"),
        ({"auth_header": 123}, "auth_header must be text, got int 123"),
    ],
)
def test_a_client_names_an_argument_of_the_wrong_type(
    arguments: dict[str, Any], message: str
) -> None:
    # Both were an AttributeError ('int' object has no attribute 'strip').
    with pytest.raises(ValueError, match=message):
        Client(**arguments)


@pytest.mark.parametrize(("timeout", "poll"), [("5", 0.5), (5, None), (True, 0.5)])
def test_jobs_wait_names_a_timeout_that_is_not_seconds(timeout: Any, poll: Any) -> None:
    client = Client(base_url="http://127.0.0.1:9")
    with pytest.raises(ValueError, match="must be positive seconds, got"):
        client.jobs.wait("job-1", timeout=timeout, poll_interval=poll)


def test_a_server_answering_fewer_items_than_were_sent_is_an_api_error(
    stub_server: StubServer,
) -> None:
    stub_server.reply(CannedResponse(200, []))
    client = Client(base_url=stub_server.url, max_retries=0)
    with pytest.raises(APIError, match=r"sent 1 item\(s\), the server answered 0"):
        client.inference.detect(body=[relevance_item()])


def test_a_context_that_is_a_mapping_is_refused_not_judged_by_its_keys() -> None:
    # list(context) of a dict gave its keys: the values were never read.
    context = {"Returns are accepted within 30 days.": "Shipping is free over 50 EUR."}
    with pytest.raises(RequestValidationError) as caught:
        assay.detect("Returns within 30 days.", user_query="Policy?", context=context)
    assert caught.value.field == "context"
    from assay.pytest_plugin import assert_detect

    with pytest.raises(RequestValidationError) as in_test:
        assert_detect("Returns within 30 days.", user_query="Policy?", context=context)
    assert in_test.value.field.endswith("context")


def test_an_unknown_judge_from_the_environment_names_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ASSAY_JUDGE", "nope")
    with pytest.raises(ValueError, match=r"unknown judge 'nope' \(from \$ASSAY_JUDGE\)"):
        assay.detect("An answer.", user_query="A question?")
