"""Retries, timeouts and transport failures of the system under test, and input checks that
must fail before any call is made."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import chatbot as chatbot_module
import pytest
from chatbot import (
    BANK_PROFILE,
    RunningChatbot,
    in_domain_rows,
    running_bot,
)

from assay.metrics.ood import (
    HttpJsonSUT,
    OpenAIChatSUT,
    score_rows,
    score_rows_sync,
    summarize,
)
from assay.metrics.ood.scorer import RowResult
from assay.metrics.ood.sut import (
    CallableSUT,
    SUTError,
    SystemUnderTest,
    ask_with_retries,
    reply_at,
)
from assay.schema import RequestValidationError


@pytest.fixture
def chatbot() -> Iterator[RunningChatbot]:
    yield from running_bot()


def config(**values: object) -> dict[str, object]:
    return {"use_case": BANK_PROFILE, "num_ood_queries": 2, **values}


async def score_one(sut: SystemUnderTest, **settings: object) -> RowResult:
    """The first in-domain row scored against `sut` with `config(**settings)`; `sut` is closed
    afterwards."""
    try:
        (result,) = await score_rows(in_domain_rows()[:1], config(**settings), sut=sut)
    finally:
        await sut.aclose()
    return result


async def test_retries_ride_out_temporary_failures(
    chatbot: RunningChatbot, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("assay.metrics.ood.sut.BACKOFF_SECONDS", 0.01)
    chatbot.policy.fail_first = 2
    sut = OpenAIChatSUT(f"{chatbot.url}/v1")
    result = await score_one(sut, n_sut_retries=2, concurrency_limit=1)
    assert result.error is None and result.score == 1.0
    assert sum(case.attempts for case in result.cases) == 3 + 2  # 3 calls, 2 of them retried


async def test_an_openai_kind_status_error_carries_the_servers_body(
    chatbot: RunningChatbot,
) -> None:
    chatbot.policy.fail_first = 1
    sut = OpenAIChatSUT(f"{chatbot.url}/v1")
    result = await score_one(sut, concurrency_limit=1)
    [failed] = [case for case in result.cases if case.status == "transport_error"]
    assert "HTTP 503" in (failed.error or "") and "temporarily unavailable" in (failed.error or "")


async def test_without_retries_a_failure_is_a_transport_error_not_behaviour(
    chatbot: RunningChatbot,
) -> None:
    chatbot.policy.fail_first = 1
    sut = HttpJsonSUT(f"{chatbot.url}/chat", reply_path="data.reply")
    result = await score_one(sut, concurrency_limit=1)
    failed = [case for case in result.cases if case.status == "transport_error"]
    assert len(failed) == 1 and "HTTP 503" in (failed[0].error or "")
    assert failed[0].label is None and failed[0].correct is None
    assert result.score is None and "1 of 3 cases failed" in (result.error or "")
    summary = summarize([result])
    assert summary.transport_failures == 1 and summary.rows_errored == 1
    # The row's two judged cases are in its output, but not in the rates: the row has no score.
    assert sum(1 for case in result.cases if case.label) == 2
    assert sum(summary.confusion.values()) == 0


async def test_slow_replies_time_out(chatbot: RunningChatbot) -> None:
    chatbot.policy.delay = 1.0
    sut = OpenAIChatSUT(f"{chatbot.url}/v1")
    result = await score_one(sut, timeout_seconds=0.05)
    assert result.score is None
    assert all(case.status == "transport_error" for case in result.cases)
    assert all("timed out after 0.05s" in (case.error or "") for case in result.cases)


async def test_unreachable_endpoint_is_reported_per_case() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    sut = HttpJsonSUT(f"http://127.0.0.1:{port}/chat")
    result = await score_one(sut, n_sut_retries=1)
    assert [case.status for case in result.cases] == ["transport_error"] * 3
    assert all(case.attempts == 2 for case in result.cases)


async def test_missing_columns_fail_before_any_call(chatbot: RunningChatbot) -> None:
    rows = [{"input_id": "a", "prompt": "hi", "sut_response": None}, {"input_id": "b"}]
    sut = OpenAIChatSUT(f"{chatbot.url}/v1")
    with pytest.raises(RequestValidationError) as caught:
        await score_rows(rows, config(), sut=sut)
    await sut.aclose()
    assert caught.value.field == "rows[1]"
    assert "prompt, sut_response" in caught.value.message
    assert chatbot.policy.requests == 0


@pytest.mark.parametrize(
    ("rows", "field", "words"),
    [
        ([{"input_id": 1, "prompt": "  ", "sut_response": None}], "rows[0].prompt", "blank"),
        (
            [{"input_id": 1, "prompt": [{"role": "user"}], "sut_response": None}],
            "rows[0].prompt[0]",
            "content",
        ),
        (
            [{"input_id": 1, "prompt": "x", "sut_response": 3}],
            "rows[0].sut_response",
            "string or null",
        ),
    ],
)
async def test_bad_rows_name_the_field(
    rows: list[dict[str, object]], field: str, words: str
) -> None:
    with pytest.raises(RequestValidationError) as caught:
        await score_rows(rows, config(), sut=CallableSUT(lambda prompt: "ok"))
    assert caught.value.field == field and words in caught.value.message


async def test_a_missing_profile_or_sut_is_a_clear_error() -> None:
    rows = in_domain_rows()
    with pytest.raises(RequestValidationError, match="use-case profile") as caught:
        await score_rows(rows, {}, sut=CallableSUT(lambda prompt: "ok"))
    assert caught.value.field == "use_case"
    with pytest.raises(RequestValidationError) as caught:
        await score_rows(rows, config())
    assert caught.value.field == "sut"
    # A bare function was an AttributeError ('function' object has no attribute 'ask').
    with pytest.raises(RequestValidationError, match=r"CallableSUT\(function\)") as caught:
        await score_rows(rows, config(), sut=lambda prompt: "ok")  # type: ignore[arg-type]
    assert caught.value.field == "sut"


async def test_concurrency_limit_bounds_calls_in_flight() -> None:
    import asyncio

    in_flight = peak = 0

    async def bot(prompt: object) -> str:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.01)
        in_flight -= 1
        return "Sorry, I can only help with banking questions."

    await score_rows(in_domain_rows(), config(concurrency_limit=2), sut=CallableSUT(bot))
    assert peak == 2


async def test_callable_failures_and_retry_backoff_are_recorded() -> None:
    calls = 0

    def flaky(prompt: object) -> str:
        nonlocal calls
        calls += 1
        raise RuntimeError("bot crashed")

    reply = await ask_with_retries(
        CallableSUT(flaky),
        "hi",
        retries=2,
        timeout=5,
        limit=__import__("asyncio").Semaphore(1),
        backoff=0.001,
    )
    assert reply.failed and reply.attempts == 3 and calls == 3
    assert reply.error == "RuntimeError: bot crashed"
    # A callable that returns no text gave a bad reply (it was recorded as a transport error).
    for returned in (None, 42):
        nothing = await ask_with_retries(
            CallableSUT(lambda prompt, r=returned: r),
            "hi",
            retries=0,
            timeout=5,
            limit=__import__("asyncio").Semaphore(1),
        )
        assert nothing.failed and nothing.kind == "bad_output", nothing
        assert "the callable returned" in (nothing.error or "")


def test_reply_path_errors_say_where_they_stopped() -> None:
    assert (
        reply_at({"choices": [{"message": {"content": "hi"}}]}, "choices.0.message.content") == "hi"
    )
    with pytest.raises(SUTError, match="stopped at 'reply'"):
        reply_at({"data": {}}, "data.reply")
    with pytest.raises(SUTError, match="not a string"):
        reply_at({"reply": 3}, "reply")


def test_body_template_must_hold_the_prompt_and_escape_it() -> None:
    with pytest.raises(ValueError, match="placeholder"):
        HttpJsonSUT("http://127.0.0.1:1/chat", body_template='{"message": "hi"}')
    sut = HttpJsonSUT("http://127.0.0.1:1/chat", body_template='{"q": "{prompt}", "n": 1}')
    assert sut.body('say "hi"\n') == b'{"q": "say \\"hi\\"\\n", "n": 1}'


async def test_openai_kind_reports_a_body_that_is_not_json_per_case(
    chatbot: RunningChatbot,
) -> None:
    # As the http kind does: a bad reply is a failed case, not an exception that ends the run.
    chatbot.policy.raw_body = b"<html>oops"
    sut = OpenAIChatSUT(f"{chatbot.url}/v1")
    result = await score_one(sut)
    assert result.score is None
    assert [case.status for case in result.cases] == ["transport_error"] * 3
    assert {case.error for case in result.cases} == {"response is not JSON: '<html>oops'"}
    assert {case.error_kind for case in result.cases} == {"bad_output"}


async def test_the_preflight_names_the_url_of_an_openai_kind_that_answers_no_json(
    chatbot: RunningChatbot,
) -> None:
    from assay.metrics.ood.config import parse_config
    from assay.metrics.ood.preflight import preflight

    chatbot.policy.raw_body = b"<html>oops"
    sut = OpenAIChatSUT(f"{chatbot.url}/v1")
    try:
        with pytest.raises(RequestValidationError) as caught:
            await preflight(sut, "What is my balance?", parse_config(config()))
    finally:
        await sut.aclose()
    assert caught.value.field == "sut"
    message = caught.value.message
    assert message.startswith(f"OpenAI-compatible endpoint {chatbot.url}/v1 (model default)")
    assert "(bad_output): response is not JSON: '<html>oops'" in message
    assert "API root" in message


@pytest.mark.parametrize("blank", ["", "  \n "])
async def test_a_blank_live_reply_is_a_bad_reply_not_an_answer(blank: str) -> None:
    (result,) = await score_rows(
        in_domain_rows()[:1], config(), sut=CallableSUT(lambda prompt: blank)
    )
    assert result.score is None
    assert {case.status for case in result.cases} == {"transport_error"}
    assert {case.error_kind for case in result.cases} == {"bad_output"}
    assert all("blank" in (case.error or "") for case in result.cases)


async def test_a_reply_with_a_lone_surrogate_or_control_characters_is_judged_cleaned() -> None:
    # A lone surrogate ("\ud800" in the SUT's JSON) stopped the whole run in the encoder; ANSI
    # escapes and NUL reached the terminal and the HTML report.
    dirty = "I can't help with that \ud800request.\x1b[31m\x00 Sorry!\x07\nBye."
    (result,) = await score_rows(
        in_domain_rows()[:1], config(), sut=CallableSUT(lambda prompt: dirty)
    )
    assert result.score is not None
    replies = {case.reply for case in result.cases}
    assert replies == {"I can't help with that \ufffdrequest.[31m Sorry!\nBye."}


async def test_a_blank_openai_reply_is_a_bad_reply(chatbot: RunningChatbot) -> None:
    chatbot.policy.reply_text = ""
    sut = OpenAIChatSUT(f"{chatbot.url}/v1")
    result = await score_one(sut)
    assert result.score is None and result.cases[0].label is None
    assert result.cases[0].error_kind == "bad_output"


@pytest.mark.parametrize("blank", ["", "   "])
async def test_a_blank_recorded_reply_is_asked_live_like_a_missing_one(blank: str) -> None:
    asked: list[object] = []

    def bot(prompt: object) -> str:
        asked.append(prompt)
        return "Sorry, I can only help with banking questions."

    row = {"input_id": "a", "prompt": "What is my balance?", "sut_response": blank}
    (result,) = await score_rows([row], config(), sut=CallableSUT(bot))
    own = result.cases[0]
    assert own.attempts == 1 and "What is my balance?" in asked  # asked, not taken as said
    assert own.reply == "Sorry, I can only help with banking questions."
    assert own.label == "over_rejection" and result.score is not None and result.score < 1.0


def test_one_sut_object_serves_several_sync_runs(
    chatbot: RunningChatbot, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each score_rows_sync runs in a new event loop; the adapters' HTTP clients were tied to
    # the first one, whose kept-alive connections failed the second call ("Event loop is
    # closed"). Real servers keep connections alive: so does the bot here.
    monkeypatch.setattr(chatbot_module._Handler, "protocol_version", "HTTP/1.1")
    rows = in_domain_rows()[:1]
    for sut in (
        OpenAIChatSUT(f"{chatbot.url}/v1"),
        HttpJsonSUT(f"{chatbot.url}/chat", '{"message": "{prompt}"}', "data.reply"),
    ):
        for _ in range(2):
            (result,) = score_rows_sync(rows, config(), sut=sut)
            assert result.score is not None
            assert all(case.status != "transport_error" for case in result.cases), result.cases


def test_a_sync_callable_that_never_returns_is_abandoned_at_the_timeout() -> None:
    release = threading.Event()
    finished = threading.Event()

    def hang(prompt: object) -> str:
        release.wait(timeout=60)
        finished.set()
        return "late"

    try:
        (result,) = score_rows_sync(
            in_domain_rows()[:1], config(timeout_seconds=0.2), sut=CallableSUT(hang)
        )
        # The run ended while the calls were still hanging: it did not wait for them.
        assert not finished.is_set()
    finally:
        release.set()
    assert result.score is None
    assert all("timed out after 0.2s" in (case.error or "") for case in result.cases)
