"""llm.ood_detection with an LLM configured, against a real OpenAI-compatible server on loopback
(llama-cpp-python serving SmolLM2-135M-Instruct) and the loopback chatbot as the system under
test. SmolLM2 is too small to judge well, so this proves the mechanics of the LLM path: the probe
generator and the judge really call the endpoint, and every row ends in a valid verdict or an
explicit error, never a made-up score."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from chatbot import BANK_PROFILE, RunningChatbot, in_domain_rows, running_bot

from assay.metrics.ood import LABELS, OpenAIChatSUT, score_rows
from llm.server import CountingProxy, counting_proxy, llama_server


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with llama_server(tmp_path_factory.mktemp("llama") / "server.log") as url:
        yield url


@pytest.fixture
def proxy(server_url: str) -> Iterator[CountingProxy]:
    with counting_proxy(server_url) as counting:
        yield counting


@pytest.fixture
def chatbot() -> Iterator[RunningChatbot]:
    yield from running_bot()


async def test_llm_generator_and_judge_call_the_endpoint_and_never_guess(
    proxy: CountingProxy,
    chatbot: RunningChatbot,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("ASSAY_LLM_BASE_URL", proxy.url)
    monkeypatch.setenv("ASSAY_LLM_MODEL", "smollm2")
    monkeypatch.setenv("ASSAY_LLM_CACHE_PATH", str(tmp_path / "calls.sqlite3"))
    monkeypatch.setenv("ASSAY_LLM_TIMEOUT", "300")  # a shared 2-core machine can be slow
    sut = OpenAIChatSUT(f"{chatbot.url}/v1", model="harbour-bot")
    try:
        results = await score_rows(
            in_domain_rows()[:2],
            {"use_case": BANK_PROFILE, "num_ood_queries": 2, "timeout_seconds": 300},
            sut=sut,
            explain=True,
        )
    finally:
        await sut.aclose()

    assert proxy.calls >= 2  # the LLM path was taken: probes and judgements asked for
    # Structured output makes even a tiny model answer in JSON, so rows really get scored. The
    # form is found once for the endpoint, by the LLM layer's capability probe: llama-cpp-python
    # refuses OpenAI's json_schema, and every call goes straight to the json_object form.
    probed = [body.get("response_format", {}).get("type") for body in proxy.probes]
    assert probed == ["json_schema", "json_object"]
    assert {body["response_format"]["type"] for body in proxy.bodies} == {"json_object"}
    # Each row's LLM calls are counted on it, and so is the probe, apart.
    assert sum(result.usage.get("calls", 0) for result in results) == proxy.calls
    assert sum(result.usage.get("probe_calls", 0) for result in results) == len(proxy.probes)
    assert any(result.score is not None for result in results)
    # A later batch with the same settings (how `assay run` feeds rows) probes no more.
    sut = OpenAIChatSUT(f"{chatbot.url}/v1", model="harbour-bot")
    try:
        await score_rows(
            in_domain_rows()[2:3],
            {"use_case": BANK_PROFILE, "num_ood_queries": 2, "timeout_seconds": 300},
            sut=sut,
        )
    finally:
        await sut.aclose()
    assert [body.get("response_format", {}).get("type") for body in proxy.probes] == probed
    for result in results:
        if result.score is None:
            assert result.error  # said why, instead of a score
            continue
        assert 0.0 <= result.score <= 1.0
        for case in result.cases:
            assert case.label in LABELS and case.probabilities is not None
            assert abs(sum(case.probabilities.values()) - 1.0) < 1e-6
