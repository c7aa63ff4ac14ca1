"""The LLM judge against a loopback stub that misbehaves on demand: rate limits, server errors,
hangs, truncated bodies and replies, missing logprobs. Each ends in a verdict or an explicit
error, and the run goes on."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from assay import retries
from assay._sync import run_sync
from assay.detectors import DETECTORS
from assay.detectors.evaluate import detect_items, parse_items, questions_for
from assay.judges import get_judge, register_judge
from assay.judges.cache import CallCache
from assay.judges.cascade import CascadeJudge
from assay.judges.openai import endpoint as endpoint_module
from assay.judges.openai.judge import OpenAIJudge
from assay.judges.openai.settings import LLMSettings
from assay.runner import run_file
from conftest import CannedResponse, StubServer, assert_relevance_contract
from llm.replies import chat_body, ok, probe_answer, rubric_reply
from llm.stub_judge import (  # noqa: F401 - restore_openai_judge is an autouse fixture
    ANSWER,
    PROBABILITIES,
    QUERY,
    item,
    relevance,
    restore_openai_judge,
    use_judge,
)


async def test_probabilities_come_from_the_answer_tokens_logprobs(stub_server: StubServer) -> None:
    use_judge(stub_server)
    stub_server.reply(rubric_reply(PROBABILITIES))
    result = await relevance()
    assert_relevance_contract(result)
    got = [entry["follow_probability"] for entry in result["instructions_list"]]
    # P(yes) / (P(yes) + P(no)): the 1e-4 mass on "maybe" is left out of the normalisation.
    assert got == [round(p, 4) for p in PROBABILITIES]
    assert len(stub_server.requests) == 1  # one call for the whole rubric
    body = stub_server.requests[0].body
    assert body["logprobs"] is True and body["temperature"] == 0.0
    assert body["response_format"]["type"] == "json_schema"
    assert stub_server.requests[0].path == "/v1/chat/completions"


async def test_429_with_retry_after_is_waited_out_then_succeeds(
    stub_server: StubServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    waits: list[float] = []
    real_sleep = retries.asyncio.sleep

    async def recording_sleep(delay: float) -> None:
        waits.append(delay)
        await real_sleep(0)

    monkeypatch.setattr(retries.asyncio, "sleep", recording_sleep)
    use_judge(stub_server)
    stub_server.reply(
        CannedResponse(429, {"error": {"message": "slow down"}}, headers={"retry-after": "3"}),
        rubric_reply(PROBABILITIES),
    )
    result = await relevance()
    assert_relevance_contract(result)
    assert len(stub_server.requests) == 2
    assert waits and waits[0] >= 3.0  # the server's retry-after, not the short backoff


async def test_500_then_success(stub_server: StubServer) -> None:
    use_judge(stub_server)
    stub_server.reply(CannedResponse(500, {"error": "boom"}), rubric_reply(PROBABILITIES))
    result = await relevance()
    assert [e["follow_probability"] for e in result["instructions_list"]] == PROBABILITIES
    assert len(stub_server.requests) == 2


async def test_persistent_5xx_gives_up_with_an_explicit_error(stub_server: StubServer) -> None:
    use_judge(stub_server, max_attempts=3)
    stub_server.reply(CannedResponse(503, {"error": "down"}))
    result = await relevance()
    assert result["error"] is True and result["kind"] == "transport"
    assert "3 attempts" in result["message"]
    assert len(stub_server.requests) == 3


async def test_client_errors_are_not_retried(stub_server: StubServer) -> None:
    use_judge(stub_server)
    stub_server.reply(CannedResponse(401, {"error": {"message": "bad key"}}))
    result = await relevance()
    assert result == {"error": True, "kind": "transport", "message": result["message"]}
    assert "401" in result["message"]
    assert len(stub_server.requests) == 1


def test_a_hang_past_the_timeout_fails_that_row_and_the_run_continues(
    stub_server: StubServer, tmp_path: Path
) -> None:
    release = threading.Event()
    use_judge(stub_server, call_timeout=0.5, max_attempts=2)
    hang = CannedResponse(200, chat_body("{}", []), hold=release)
    stub_server.reply(hang, hang, rubric_reply(PROBABILITIES))
    rows = tmp_path / "rows.jsonl"
    rows.write_text(
        "\n".join(json.dumps({"user_query": QUERY, "generated_text": t}) for t in (ANSWER, "Six."))
    )
    try:
        summary = run_file(rows, detectors=["output_relevance"], judge="openai", batch_size=1)
    finally:
        release.set()
    lines = [json.loads(line) for line in Path(summary.output_path or "").read_text().splitlines()]
    assert lines[0]["output_relevance"]["kind"] == "timeout"
    # The setting that ran out is named, with how to raise it.
    assert (
        "(call_timeout 0.5s; raise it with ASSAY_LLM_TIMEOUT"
        in (lines[0]["output_relevance"]["message"])
    )
    assert_relevance_contract(lines[1]["output_relevance"])
    assert summary.detectors["output_relevance"].rows_errored == 1
    assert summary.detectors["output_relevance"].rows_scored == 1
    # Both timed-out attempts and the successful call are accounted for.
    assert lines[0]["usage"]["calls"] == 2 and lines[1]["usage"]["calls"] == 1
    assert summary.to_dict()["llm"]["calls"] == 3


async def test_a_truncated_http_body_is_an_explicit_error(stub_server: StubServer) -> None:
    use_judge(stub_server)
    text = json.dumps(chat_body('{"1": "yes"}', [0.9]))
    stub_server.reply(CannedResponse(200, text[: len(text) // 2]))
    result = await relevance()
    assert result["error"] is True and result["kind"] == "bad_output"


async def test_a_truncated_reply_is_reasked_once(stub_server: StubServer) -> None:
    use_judge(stub_server)
    cut = CannedResponse(200, chat_body('{"1": "yes", "2": "no", "3', [0.9, 0.2], "length"))
    stub_server.reply(cut, rubric_reply(PROBABILITIES))
    result = await relevance()
    got = [e["follow_probability"] for e in result["instructions_list"]]
    # The answers read before the cut are kept; the re-ask supplies the rest.
    assert got == [0.9, 0.2, 0.65, 0.4]
    assert len(stub_server.requests) == 2
    reask = stub_server.requests[1].body["messages"]
    assert reask[-2]["role"] == "assistant" and "could not be read" in reask[-1]["content"]


async def test_a_reply_still_unreadable_after_the_reask_is_unscored(
    stub_server: StubServer,
) -> None:
    use_judge(stub_server)
    stub_server.reply(CannedResponse(200, chat_body('{"1": "yes", "2', [0.9], "length")))
    [result] = await detect_items(parse_items([item()]))
    failed = result["output_relevance"]
    assert failed["error"] is True and failed["kind"] == "bad_output"
    assert "prioritize_relevant" in failed["message"] and "token limit" in failed["message"]
    assert len(stub_server.requests) == 2  # one re-ask, no more


@pytest.mark.parametrize("explain", [False, True])
async def test_an_endpoint_without_logprobs_is_judged_by_votes_and_says_so(
    stub_server: StubServer, explain: bool
) -> None:
    judge = use_judge(stub_server, votes=3)
    stub_server.probe = probe_answer(logprobs=False)
    stub_server.reply(
        ok(chat_body('{"1": "yes", "2": "no", "3": "yes", "4": "no"}')),
        ok(chat_body('{"1": "yes", "2": "yes", "3": "no", "4": "no"}')),
        ok(chat_body('{"1": "yes", "2": "no", "3": "no", "4": "no"}')),
    )
    questions = questions_for(
        parse_items([item(explain=explain)])[0], DETECTORS["output_relevance"]
    )
    answers = await judge.answer(questions)
    probabilities = [a.follow_probability for a in answers]  # type: ignore[union-attr]
    assert probabilities == pytest.approx([1.0, 0.3333, 0.3333, 0.0])
    assert all(a.evidence["method"] == "votes" for a in answers)  # type: ignore[union-attr]
    if explain:
        assert "sampled answers" in answers[0].explanation  # type: ignore[union-attr]
    # The probe decided it, before any row: every row call is a vote, none asks for logprobs.
    votes = [r.body for r in stub_server.requests]
    assert len(votes) == 3 and len(stub_server.probes) == 1
    assert all(v["temperature"] > 0 and "logprobs" not in v for v in votes)


async def test_a_refused_json_schema_is_found_by_the_probe_and_rows_use_json_object(
    stub_server: StubServer,
) -> None:
    use_judge(stub_server, structured="auto")
    stub_server.probe = probe_answer(refuse_forms={"json_schema"})
    stub_server.reply(rubric_reply(PROBABILITIES))
    first = await relevance()
    assert_relevance_contract(first)
    probes = [r.body.get("response_format", {}).get("type") for r in stub_server.probes]
    assert probes == ["json_schema", "json_object"]
    [row] = stub_server.requests
    assert row.body["response_format"]["type"] == "json_object"
    assert "schema" in row.body["response_format"]


def test_the_cache_suppresses_repeat_calls(stub_server: StubServer, tmp_path: Path) -> None:
    use_judge(stub_server, tmp_path)
    stub_server.reply(rubric_reply(PROBABILITIES))
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"user_query": QUERY, "generated_text": ANSWER}) + "\n")
    first = run_file(rows, detectors=["output_relevance"], judge="openai")
    assert len(stub_server.requests) == 1 and first.usage.calls == 1
    assert first.usage.probe_calls == 1 == len(stub_server.probes)
    # The row's call and the probe each reported 120 prompt and 30 completion tokens.
    assert first.usage.prompt_tokens == 240 and first.usage.completion_tokens == 60
    # A new judge (as in a new process) over the same file reads the same SQLite cache, once
    # its own probe has said who answers.
    use_judge(stub_server, tmp_path)
    second = run_file(rows, detectors=["output_relevance"], judge="openai")
    assert len(stub_server.requests) == 1 and len(stub_server.probes) == 2
    assert second.usage.calls == 0 and second.usage.cached_calls == 1
    out = Path(first.output_path or "").read_text()
    assert json.loads(out)["output_relevance"]["score"] == 0.5
    # The call, and the probe's findings (kept for --dry-run estimates only).
    assert len(CallCache(tmp_path / "calls.sqlite3", 60)) == 2


def test_no_cache_calls_again(stub_server: StubServer, tmp_path: Path) -> None:
    use_judge(stub_server, tmp_path, cache=False)
    stub_server.reply(rubric_reply(PROBABILITIES))
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"user_query": QUERY, "generated_text": ANSWER}) + "\n")
    run_file(rows, detectors=["output_relevance"], judge="openai")
    run_file(rows, detectors=["output_relevance"], judge="openai")
    assert len(stub_server.requests) == 2


def test_unreachable_endpoint_is_a_transport_error() -> None:
    judge = OpenAIJudge(
        LLMSettings(
            base_url="http://127.0.0.1:9/v1", cache=False, max_attempts=2, backoff_base=0.01
        )
    )
    register_judge("openai", lambda: judge)
    assert get_judge("openai") is judge

    [result] = run_sync(detect_items(parse_items([item()])))
    assert result["output_relevance"]["kind"] == "transport"
    # The message names where it tried, so a wrong (or default) base URL is plain to see.
    assert "http://127.0.0.1:9/v1/chat/completions" in result["output_relevance"]["message"]


@pytest.mark.parametrize(("reprobe_after", "probes"), [(30.0, 1), (0.0, 3)])
def test_an_unreachable_endpoint_is_probed_once_not_per_row(
    monkeypatch: pytest.MonkeyPatch, reprobe_after: float, probes: int
) -> None:
    monkeypatch.setattr(endpoint_module, "REPROBE_AFTER_SECONDS", reprobe_after)
    judge = OpenAIJudge(
        LLMSettings(
            base_url="http://127.0.0.1:9/v1",
            cache=False,
            max_attempts=2,
            backoff_base=0.01,
            concurrency=1,
        )
    )
    register_judge("openai", lambda: judge)
    calls: list[object] = []
    real_probe = judge.endpoint._probe

    async def counted(*args: object, **kwargs: object) -> object:
        calls.append(args)
        return await real_probe(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(judge.endpoint, "_probe", counted)
    texts = ("Boil them.", "Another.", "A third.")
    items = parse_items([{**item(), "generated_text": text} for text in texts])

    results = run_sync(detect_items(items))

    # Every row fails as transport, naming the URL; with the failure standing for 30 s the
    # dead endpoint was probed once (its retries included), not once per row. (One that
    # answers with an HTTP error is probed again: tests/test_llm_rows.py.)
    assert all(r["output_relevance"]["kind"] == "transport" for r in results)
    assert all("127.0.0.1:9" in r["output_relevance"]["message"] for r in results)
    assert len(calls) == probes


def test_cascade_escalations_are_counted_in_the_run_summary(
    stub_server: StubServer, tmp_path: Path
) -> None:
    llm = use_judge(stub_server, strategy="per_instruction")
    stub_server.reply(CannedResponse(200, chat_body("yes", [0.8])))
    # A band of [0, 1] holds every probability: all four instructions go up.
    register_judge("cascade", lambda: CascadeJudge(get_judge("embedded"), llm, (0.0, 1.0)))
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"user_query": QUERY, "generated_text": ANSWER}) + "\n")
    try:
        summary = run_file(rows, detectors=["output_relevance"], judge="cascade")
    finally:
        from assay.judges import _cascade

        register_judge("cascade", _cascade)
    assert summary.usage.escalated == 4 and summary.usage.calls == 4
    line = json.loads(Path(summary.output_path or "").read_text())
    assert [e["follow_probability"] for e in line["output_relevance"]["instructions_list"]] == [
        0.8
    ] * 4
    assert line["usage"]["escalated"] == 4


def test_cli_rejects_a_bad_llm_setting_naming_it(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "assay.cli", "detect", "-q", "Hi?", "-r", "Hello."]
        + ["--judge", "openai", "--llm", "strategy=sometimes"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert "--llm (llm.strategy): must be one of fields, per_instruction" in result.stderr
    assert "Traceback" not in result.stderr


async def test_a_base_url_where_nothing_answers_is_named_as_such(stub_server: StubServer) -> None:
    # A path without /chat/completions (a 404 for every form) was reported as an endpoint that
    # "refused every form of the capability probe".
    use_judge(stub_server)
    stub_server.probe = lambda body: CannedResponse(404, {"detail": "Not Found"})
    stub_server.reply(CannedResponse(404, {"detail": "Not Found"}))
    result = await relevance()
    assert result["error"] is True and result["kind"] == "transport"
    assert "has no chat completions route (HTTP 404 for every request" in result["message"]
    assert "base_url (ASSAY_LLM_BASE_URL or --llm base_url=...)" in result["message"]


async def test_a_model_the_endpoint_does_not_serve_is_named_not_the_base_url(
    stub_server: StubServer,
) -> None:
    # OpenAI, vLLM and Ollama answer an unknown model with a 404; it sent the user to fix a
    # base URL that was right.
    use_judge(stub_server)
    missing = {
        "error": {"message": "The model `stub-model` does not exist", "code": "model_not_found"}
    }
    stub_server.probe = lambda body: CannedResponse(404, missing)
    stub_server.reply(CannedResponse(404, missing))
    result = await relevance()
    assert result["error"] is True and result["kind"] == "transport"
    assert "does not serve the model 'stub-model'" in result["message"]
    assert "ASSAY_LLM_MODEL (or --llm model=...)" in result["message"]
    assert "chat completions route" not in result["message"]
    # One probe says it: no other form of the request serves a model the endpoint lacks (it
    # tried all six), and the status is said once ("HTTP 404: HTTP 404: ...").
    assert len(stub_server.probes) == 1
    assert result["message"].count("HTTP 404") == 1


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        (CannedResponse(401, {"error": {"message": "Incorrect API key"}}), "ASSAY_LLM_API_KEY"),
        (CannedResponse(403, {"error": {"message": "No access"}}), "refused access"),
        (CannedResponse(200, {"object": "not a completion"}), "is base_url"),
    ],
)
def test_an_endpoint_that_refuses_the_key_or_is_no_api_fails_every_row_after_one_probe(
    stub_server: StubServer, answer: CannedResponse, words: str
) -> None:
    # A wrong key (or an HTML page answering 200) was probed again by every row: a run of
    # 10,000 rows sent 20,000 refused requests.
    use_judge(stub_server)
    stub_server.probe = lambda body: answer
    stub_server.reply(answer)
    items = parse_items([item(text=text) for text in ("Boil them.", "Another.", "A third.")])

    results = run_sync(detect_items(items))

    messages = [r["output_relevance"]["message"] for r in results]
    assert all(r["output_relevance"]["kind"] == "transport" for r in results)
    assert all(words in m for m in messages), messages
    assert len(stub_server.probes) == 1 and stub_server.requests == []


def test_a_probe_that_times_out_stands_for_the_rows_queued_behind_it(
    stub_server: StubServer,
) -> None:
    # An endpoint that takes connections but never answers: each row queued behind the probe
    # probed again and waited out its own timeout (five minutes a batch with the defaults).
    release = threading.Event()
    use_judge(stub_server, call_timeout=0.3, max_attempts=1, concurrency=1)
    stub_server.probe = lambda body: CannedResponse(200, probe_answer(), hold=release)
    items = parse_items([item(text=text) for text in ("Boil them.", "Another.", "A third.")])
    try:
        results = run_sync(detect_items(items))
    finally:
        release.set()
    kinds = [r["output_relevance"]["kind"] for r in results]
    assert kinds == ["timeout"] * 3
    assert len(stub_server.probes) == 1 and stub_server.requests == []
