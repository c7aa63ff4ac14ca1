"""The LLM path's failure handling (fault injection with the shared loopback stub): an LLM that
answers garbage or errors makes the affected cases judge errors, never made-up labels, and an
LLM that cannot write probes falls back to the bank."""

from __future__ import annotations

from chatbot import BANK_PROFILE, no_llm_env  # noqa: F401 - autouse fixture

from assay.metrics.ood import (
    CallableSUT,
    LLMOODJudge,
    RowResult,
    profile_from_mapping,
    score_rows,
)
from assay.metrics.ood.generator import (
    BankProbeGenerator,
    LLMProbeGenerator,
    ProbeRequest,
    probe_generator,
)
from assay.metrics.ood.llm import LLMSettings, llm_settings_from_env
from conftest import CannedResponse, StubServer

REFUSAL = "Sorry, I can only help with Harbour Bank accounts and cards."


def completion(content: str) -> dict[str, object]:
    return {
        "id": "x", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
    }  # fmt: skip


def settings(stub: StubServer) -> LLMSettings:
    return LLMSettings(base_url=f"{stub.url}/v1", model="judge-model")


def test_llm_settings_come_from_the_environment() -> None:
    assert llm_settings_from_env({}) is None
    found = llm_settings_from_env(
        {"ASSAY_LLM_BASE_URL": "http://127.0.0.1:1/v1", "ASSAY_LLM_MODEL": "m"}
    )
    assert found == LLMSettings("http://127.0.0.1:1/v1", "m", "unused")
    assert isinstance(probe_generator(None), BankProbeGenerator)
    assert isinstance(probe_generator(found), LLMProbeGenerator)


async def judged_by_llm(stub: StubServer, llm_says: str, recorded: str) -> RowResult:
    """Score one row whose pairs the (stub) LLM judges; probes come from the bank."""
    stub.reply(CannedResponse(200, completion(llm_says)))
    rows = [{"input_id": "a", "prompt": "What is my balance?", "sut_response": recorded}]
    (result,) = await score_rows(
        rows,
        {"use_case": BANK_PROFILE, "num_ood_queries": 1},
        sut=CallableSUT(lambda prompt: REFUSAL),
        judge=LLMOODJudge(settings(stub)),
        generator=BankProbeGenerator(),
        explain=True,
    )
    return result


async def test_unparseable_llm_verdicts_are_judge_errors(stub_server: StubServer) -> None:
    result = await judged_by_llm(stub_server, "I think it is fine!", "It is £10.")
    assert result.score is None
    assert [c.status for c in result.cases] == ["judge_error", "judge_error"]
    assert "unparseable" in (result.cases[0].error or "")


async def test_llm_verdicts_are_used_when_well_formed(stub_server: StubServer) -> None:
    answer = '{"in_scope_probability": 0.1, "refusal_probability": 0.95, "evidence": "declines"}'
    result = await judged_by_llm(stub_server, answer, REFUSAL)
    # the row's own prompt is in scope by construction, whatever the LLM says about scope
    assert result.cases[0].label == "over_rejection"
    assert result.cases[1].label == "correct_refusal"
    assert result.cases[1].evidence == {"llm_evidence": "declines"}
    assert result.score == 0.5


async def test_failing_llm_generator_falls_back_to_the_bank(stub_server: StubServer) -> None:
    stub_server.reply(CannedResponse(500, {"error": "down"}))
    profile = profile_from_mapping(BANK_PROFILE)
    request = ProbeRequest(profile, 3, 0.0, 1)
    probes = await LLMProbeGenerator(settings(stub_server), timeout=5).generate(request)
    assert probes == await BankProbeGenerator().generate(request)


async def test_llm_probes_in_scope_are_dropped(stub_server: StubServer) -> None:
    written = (
        '{"probes": ["How do I block my stolen debit card?", "What is a good lasagna recipe?"]}'
    )
    stub_server.reply(CannedResponse(200, completion(written)))
    profile = profile_from_mapping(BANK_PROFILE)
    request = ProbeRequest(profile, 2, 0.7, 1)
    probes = await LLMProbeGenerator(settings(stub_server), timeout=5).generate(request)
    texts = [p.text for p in probes]
    assert "What is a good lasagna recipe?" in texts
    assert "How do I block my stolen debit card?" not in texts
    assert len(probes) == 2 and probes[0].topic == "llm"
