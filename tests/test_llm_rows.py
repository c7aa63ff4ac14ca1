"""One bad row changes nothing else (issue 17): the endpoint's capabilities come from one
known-good probe, never from a user row; a refused row is that row's own error; the cache holds
only real answers, under a key that says who gave them. Fault injection with the loopback stub.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from typing import Any

import pytest

from assay.detectors import DETECTORS
from assay.detectors.evaluate import detect_items, parse_items, questions_for
from assay.judges import get_judge
from assay.judges.cache import CallCache
from assay.judges.openai.probe import PROBE_USER
from assay.runner import RunOptions, run_file
from conftest import CannedResponse, StubServer, serve_stub
from llm.replies import (
    answer_token,
    chat_body,
    ok,
    plain,
    probe_answer,
    route_by_response,
    rubric_reply,
    token_body,
)
from llm.stub_judge import (  # noqa: F401 - restore_openai_judge is an autouse fixture
    PROBABILITIES,
    item,
    probabilities,
    relevance,
    restore_openai_judge,
    use_judge,
    write_rows,
)

TOO_LONG = CannedResponse(
    400,
    {
        "error": {
            "message": "This model's maximum context length is 4096 tokens. However, you "
            "requested 9000 tokens (8488 in the messages, 512 in the completion).",
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
    },
)
FILTERED = CannedResponse(
    400,
    {"error": {"message": "The response was filtered", "code": "content_filter"}},
)
EGGS, TOAST = [0.9, 0.2, 0.65, 0.4], [0.3, 0.8, 0.1, 0.7]


def scored_lines(summary: Any) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(summary.output_path).read_text().splitlines()]


@pytest.mark.parametrize("explain", [False, True])
def test_an_overlong_row_fails_alone_and_changes_nothing_for_later_rows(
    stub_server: StubServer, tmp_path: Path, explain: bool
) -> None:
    use_judge(stub_server, tmp_path)
    stub_server.route = route_by_response(
        {
            "eggs": rubric_reply(EGGS, explain=explain),
            "toast": rubric_reply(TOAST, explain=explain),
            "LONG": TOO_LONG,
        }
    )
    rows = write_rows(tmp_path, ["Boil the eggs 6 minutes.", "LONG " * 50, "Butter the toast."])
    one_at_a_time = RunOptions(batch_size=1, workers=1)
    run = {"detectors": ["output_relevance"], "judge": "openai", "explain": explain}
    first = run_file(rows, options=one_at_a_time, **run)
    if explain:  # the flag reaches the rows through their config
        assert all("quote" in r.body["response_format"]["json_schema"]["schema"]["required"][1]
                   for r in stub_server.requests)  # fmt: skip
    eggs, long, toast = (line["output_relevance"] for line in scored_lines(first))
    assert long["error"] is True and long["kind"] == "input_too_long"
    assert "maximum context length" in long["message"]
    # The rows before and after are read from their logprobs, exactly as they would be alone.
    assert probabilities(eggs) == EGGS and probabilities(toast) == TOAST
    bodies = [r.body for r in stub_server.requests]
    assert len(bodies) == 3 and len(stub_server.probes) == 1
    assert all(b["logprobs"] is True and b["temperature"] == 0.0 for b in bodies)
    assert first.detectors["output_relevance"].errors_by_kind == {"input_too_long": 1}
    assert first.usage.voted == 0
    # A new process on the same cache: the two answers come from it, the long row is asked
    # again (its refusal was never stored) and fails the same way; still no votes.
    use_judge(stub_server, tmp_path)
    second = run_file(rows, options=one_at_a_time, **run)
    assert second.usage.cached_calls == 2 and second.usage.calls == 1
    assert [line["output_relevance"] for line in scored_lines(second)] == [eggs, long, toast]
    assert len(stub_server.requests) == 4 and stub_server.requests[3].body["logprobs"] is True


async def test_a_content_filter_refusal_or_cut_is_that_rows_own_error(
    stub_server: StubServer, tmp_path: Path
) -> None:
    judge = use_judge(stub_server, tmp_path)
    stub_server.reply(FILTERED)
    refused = await relevance(text="Something the filter dislikes.")
    assert refused["kind"] == "content_filtered"
    cut = chat_body('{"1": "yes"', [0.9], finish_reason="content_filter")
    stub_server.reply(ok(cut))
    filtered = await relevance(text="Something else it dislikes.")
    assert filtered["kind"] == "content_filtered"
    stub_server.reply(rubric_reply(PROBABILITIES))
    assert probabilities(await relevance()) == PROBABILITIES
    assert judge.endpoint.found is not None and judge.endpoint.found.logprobs
    assert len(CallCache(tmp_path / "calls.sqlite3", 60)) == 2  # the probe record and one answer


async def test_capabilities_are_probed_once_on_a_known_good_request_and_logged(
    stub_server: StubServer, caplog: pytest.LogCaptureFixture
) -> None:
    judge = use_judge(stub_server, structured="auto", concurrency=4)
    stub_server.reply(rubric_reply(PROBABILITIES))
    raw = [item(text=f"Boil them for {minutes} minutes.") for minutes in range(6)]
    questions = [
        q
        for parsed in parse_items(raw)
        for q in questions_for(parsed, DETECTORS["output_relevance"])
    ]
    with caplog.at_level(logging.INFO, logger="assay.judges.openai.endpoint"):
        answers = await judge.answer(questions)
    assert all(a.evidence["method"] == "logprobs" for a in answers)  # type: ignore[union-attr]
    # Six rubrics started together; one probe answered all of them, and it carries no user text.
    [probe] = stub_server.probes
    assert [m["content"] for m in probe.body["messages"]][-1] == PROBE_USER
    assert not any("Boil" in m["content"] for m in probe.body["messages"])
    assert len(stub_server.requests) == 6
    assert any(
        "structured output json_schema, logprobs listed" in r.getMessage() for r in caplog.records
    )


@pytest.mark.parametrize("status", [503, 429])
async def test_a_failed_probe_stands_for_a_while_then_the_next_row_probes_again(
    stub_server: StubServer, status: int
) -> None:
    use_judge(stub_server, max_attempts=1)
    healthy = probe_answer()
    outages = [CannedResponse(status, {"error": "warming up"})]
    stub_server.probe = lambda body: outages.pop() if outages else healthy(body)
    stub_server.reply(rubric_reply(PROBABILITIES))
    down = await relevance()
    assert down["kind"] == ("transport" if status == 503 else "rate_limited")
    assert not stub_server.requests
    # Within REPROBE_AFTER_SECONDS a row fails at once, with no call: an endpoint failing every
    # retry cost each row its own probe and retries (80 calls for 10 rows).
    again = await relevance()
    assert again["kind"] == down["kind"] and len(stub_server.probes) == 1
    # Once that time is up, the next row probes again and is judged: a failed probe taught
    # nothing about what the endpoint can do.
    get_judge("openai").endpoint._unreachable = None  # type: ignore[attr-defined]  # time is up
    assert probabilities(await relevance()) == PROBABILITIES
    assert len(stub_server.probes) == 2 and stub_server.requests[0].body["logprobs"] is True


async def test_an_endpoint_refusing_the_logprobs_parameter_is_voted_on_from_the_start(
    stub_server: StubServer,
) -> None:
    use_judge(stub_server, structured="auto", votes=2)
    stub_server.probe = probe_answer(refuse_logprobs=True)
    stub_server.reply(ok(chat_body('{"1": "yes", "2": "no", "3": "yes", "4": "yes"}')))
    result = await relevance()
    assert probabilities(result) == [1.0, 0.0, 1.0, 1.0]
    # Every form with logprobs was refused, then json_schema without them was accepted.
    asked = [(p.body.get("response_format", {}).get("type"), "logprobs" in p.body)
             for p in stub_server.probes]  # fmt: skip
    assert asked == [
        ("json_schema", True), ("json_object", True), (None, True), ("json_schema", False),
    ]  # fmt: skip
    assert len(stub_server.requests) == 2  # two votes, no row ever refused
    assert all("logprobs" not in r.body for r in stub_server.requests)


async def test_empty_top_logprobs_mean_votes_never_a_certain_zero_or_one(
    stub_server: StubServer,
) -> None:
    use_judge(stub_server, votes=2)
    stub_server.probe = probe_answer(listed=0)
    stub_server.reply(
        ok(chat_body('{"1": "yes", "2": "yes", "3": "no", "4": "no"}')),
        ok(chat_body('{"1": "yes", "2": "no", "3": "no", "4": "no"}')),
    )
    result = await relevance()
    assert probabilities(result) == [1.0, 0.5, 0.0, 0.0]
    assert all("logprobs" not in r.body for r in stub_server.requests)


async def test_an_answer_without_listed_alternatives_is_an_error_not_a_certainty(
    stub_server: StubServer,
) -> None:
    use_judge(stub_server)  # the probe saw alternatives; this one reply lists none
    bare = [plain('{"1": "'), ("yes", {}), plain('"}')]
    stub_server.reply(ok(token_body(bare)))
    [result] = [await relevance()]
    assert result["kind"] == "bad_output" and "no top_logprobs" in result["message"]


async def test_an_endpoint_refusing_every_probe_fails_rows_without_calling_again(
    stub_server: StubServer,
) -> None:
    use_judge(stub_server, structured="auto")
    refused = CannedResponse(400, {"error": {"message": "model 'stub-model' not found"}})
    stub_server.probe = lambda body: refused
    first = await relevance()
    assert first["kind"] == "transport" and "capability probe" in first["message"]
    assert len(stub_server.probes) == 6 and not stub_server.requests
    second = await relevance()
    assert second == first and len(stub_server.probes) == 6


def test_the_cache_key_says_who_answered_and_in_what_form(
    stub_server: StubServer, tmp_path: Path
) -> None:
    rows = write_rows(tmp_path, ["Boil the eggs for 6 minutes."])

    def score(stub: StubServer, **overrides: Any) -> list[float]:
        use_judge(stub, tmp_path, **overrides)
        summary = run_file(rows, detectors=["output_relevance"], judge="openai", restart=True)
        return probabilities(scored_lines(summary)[0]["output_relevance"])

    stub_server.reply(rubric_reply([0.9] * 4))
    assert score(stub_server) == [0.9] * 4
    assert score(stub_server) == [0.9] * 4 and len(stub_server.requests) == 1  # a cache hit
    with serve_stub() as other:  # endpoint B, same model name, same cache file
        other.reply(rubric_reply([0.1] * 4))
        assert score(other) == [0.1] * 4 and len(other.requests) == 1
    # Same base URL, but the server now reports another model behind the name.
    stub_server.probe = probe_answer(model="stub-model-v2")
    stub_server.reply(rubric_reply([0.3] * 4))
    assert score(stub_server) == [0.3] * 4 and len(stub_server.requests) == 2
    # Another response format, or other sampling settings: other calls.
    stub_server.reply(rubric_reply([0.6] * 4))
    assert score(stub_server, structured="json_object") == [0.6] * 4
    stub_server.reply(rubric_reply([0.7] * 4))
    assert score(stub_server, top_logprobs=5) == [0.7] * 4
    assert len(stub_server.requests) == 4


async def test_unreadable_replies_are_never_cached(stub_server: StubServer, tmp_path: Path) -> None:
    use_judge(stub_server, tmp_path)
    stub_server.reply(ok(token_body([plain("I'm sorry, I cannot grade this.")])))
    for _ in range(2):
        result = await relevance()
        assert result["kind"] == "bad_output"
    # Each attempt asked and re-asked afresh; only the probe's findings were stored.
    assert len(stub_server.requests) == 4
    assert len(CallCache(tmp_path / "calls.sqlite3", 60)) == 1


async def test_a_low_confidence_answer_is_unscored_not_a_guess(stub_server: StubServer) -> None:
    use_judge(stub_server)
    tokens = [plain('{"1": "'), answer_token("yes", 0.6, mass=0.0008), plain('", "2": "')]
    tokens += [answer_token("no", 0.2), plain('", "3": "'), answer_token("yes", 0.7)]
    tokens += [plain('", "4": "'), answer_token("no", 0.3), plain('"}')]
    stub_server.reply(ok(token_body(tokens)))
    result = await relevance()
    assert result["kind"] == "low_confidence_answer"
    assert "core_intent" in result["message"] and "0.0008" in result["message"]
    assert len(stub_server.requests) == 1  # a real answer, not re-asked


async def test_identical_rows_in_one_batch_are_asked_once_and_get_the_same_verdicts(
    stub_server: StubServer,
) -> None:
    # Grouped by text, the copies' instructions went into one prompt twice (8 numbered
    # instructions) and each copy got its own, different verdicts.
    use_judge(stub_server)
    stub_server.reply(rubric_reply(PROBABILITIES))

    results = await detect_items(parse_items([item(), item(), item(text="Another answer.")]))

    first, second, other = (probabilities(dict(r["output_relevance"])) for r in results)
    assert first == second == PROBABILITIES
    assert len(stub_server.requests) == 2  # the two distinct rows, one rubric each
    for request in stub_server.requests:
        prompt = json.dumps(request.body["messages"])
        assert "4. " in prompt and "5. " not in prompt  # four instructions, not eight


def test_a_row_that_runs_out_of_time_still_counts_the_calls_it_made(
    stub_server: StubServer, tmp_path: Path
) -> None:
    # The calls were sent (and paid for), but the error line had no usage and the run's
    # summary said 0 calls.
    use_judge(stub_server)
    release = threading.Event()
    stub_server.reply(CannedResponse(200, rubric_reply(EGGS).body, hold=release))
    rows = write_rows(tmp_path, ["Boil the eggs 6 minutes.", "Butter the toast."])
    try:
        summary = run_file(
            rows,
            options=RunOptions(batch_size=2, workers=1, row_timeout=0.3),
            detectors=["output_relevance"],
            judge="openai",
        )
    finally:
        release.set()

    lines = scored_lines(summary)
    assert all(line["error"]["kind"] == "timeout" for line in lines), lines
    # Each row's call in the batch, then its call on its own: two each.
    assert [line["usage"]["calls"] for line in lines] == [2, 2]
    assert summary.usage.calls == 4 == len(stub_server.requests)
