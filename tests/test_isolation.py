"""One item's failure never fails the items judged with it: the embedded judge, the core and the
clients each answer a failed batch again item by item, or refuse the item before it is sent."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from assay import Client
from assay.detectors import DETECTORS
from assay.detectors.evaluate import detect_items, parse_items, questions_for
from assay.judges import Judge, Question, Verdict, get_judge, register_judge
from assay.judges.embedded.judge import EmbeddedJudge
from assay.schema import JudgeFailure, RequestValidationError
from conftest import StubServer


def _item(text: str, **fields: Any) -> dict[str, Any]:
    return {
        "user_query": "What is the refund policy?",
        "generated_text": text,
        "config": {"output_relevance": {"detector_name": "default"}},
    } | fields


def _embedded() -> EmbeddedJudge:
    judge = get_judge("embedded")
    inner = getattr(judge, "inner", judge)  # the server tests may have wrapped it for batching
    assert isinstance(inner, EmbeddedJudge)
    return inner


def test_the_embedded_judge_fails_only_the_item_its_tokenizer_refuses() -> None:
    """Validation refuses lone surrogates; this goes around it, to the real tokenizer."""
    detector = DETECTORS["output_relevance"]
    texts = [f"Refunds are paid within {n} days." for n in range(3)]
    [good_0, good_1, good_2] = parse_items([_item(text) for text in texts])
    poisoned = [
        Question(q.detector, q.check, q.instruction, "refunds \ud800", q.user_query)
        for q in questions_for(good_0, detector)
    ]
    judge = _embedded()
    batch = questions_for(good_0, detector) + poisoned + questions_for(good_1, detector)
    batch += questions_for(good_2, detector)

    answers = judge.answer_sync(batch)

    assert all(isinstance(a, JudgeFailure) for a in answers[4:8])
    alone = [judge.answer_sync(questions_for(item, detector)) for item in (good_0, good_1, good_2)]
    assert answers[:4] + answers[8:] == alone[0] + alone[1] + alone[2]


class _RaisesOnPoison(Judge):
    """Fault injection: raises (as a buggy backend would) when a call includes "poison"."""

    name = "raises-on-poison"

    def __init__(self) -> None:
        self.calls: list[int] = []

    async def answer(self, questions: Sequence[Question]) -> list[Verdict | JudgeFailure]:
        self.calls.append(len(questions))
        if any("poison" in q.generated_text for q in questions):
            raise ValueError("backend cannot handle this item")
        return [Verdict(0.8, "fine") for _ in questions]


@pytest.fixture
def raises_on_poison() -> _RaisesOnPoison:
    judge = _RaisesOnPoison()
    register_judge(judge.name, lambda: judge)
    return judge


def test_the_core_answers_a_failed_batch_item_by_item(raises_on_poison: _RaisesOnPoison) -> None:
    lenient = {"must_compute": "ignore_failures"}
    items = parse_items([_item(f"answer {n}", **lenient) for n in range(4)])
    items.insert(2, parse_items([_item("poison", **lenient)])[0])

    results = asyncio.run(detect_items(items, judge=raises_on_poison.name))

    assert raises_on_poison.calls[0] == 20  # one call for five items, which raised
    assert results[2]["output_relevance"] == {
        "error": True,
        "kind": "judge_error",
        "message": "ValueError: backend cannot handle this item",
    }
    for n in (0, 1, 3, 4):
        assert results[n]["output_relevance"]["score"] == 1.0


class _StoppedMidRun(Judge):
    """What a judge thread meets once Ctrl-C has begun the interpreter's shutdown."""

    name = "stopped-mid-run"

    def __init__(self) -> None:
        self.calls = 0

    async def answer(self, questions: Sequence[Question]) -> list[Verdict | JudgeFailure]:
        self.calls += 1
        raise RuntimeError("cannot schedule new futures after interpreter shutdown")


def test_a_stopped_run_is_no_judge_failure_to_log_or_retry(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # An interrupted `assay run` printed a traceback per item: each batch was answered again
    # item by item, and each item's failure logged with its traceback.
    judge = _StoppedMidRun()
    register_judge(judge.name, lambda: judge)
    items = parse_items([_item(f"answer {n}") for n in range(3)])
    with pytest.raises(RuntimeError, match="interpreter shutdown"):
        asyncio.run(detect_items(items, judge=judge.name))
    assert judge.calls == 1
    assert not [r for r in caplog.records if r.levelname in ("WARNING", "ERROR")]


def test_the_embedded_judge_stops_with_the_interpreter(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import assay.judges.embedded.judge as embedded

    def stopped(*_: Any) -> None:
        raise RuntimeError("cannot schedule new futures after interpreter shutdown")

    monkeypatch.setattr(embedded, "gather", stopped)
    detector = DETECTORS["output_relevance"]
    batch = [
        q
        for item in parse_items([_item("one"), _item("two")])
        for q in questions_for(item, detector)
    ]
    with pytest.raises(RuntimeError, match="interpreter shutdown"):
        _embedded().answer_sync(batch)
    assert not [r for r in caplog.records if r.levelname in ("WARNING", "ERROR")]


def test_the_remote_client_refuses_unencodable_text_before_sending(
    stub_server: StubServer,
) -> None:
    client = Client(auth_header="Bearer k", base_url=stub_server.url)
    with pytest.raises(RequestValidationError) as raised:
        client.inference.detect(body=[_item("fine"), _item("bad \udc00")])
    assert raised.value.field == "[1].generated_text"
    assert "lone surrogate (U+DC00 at character 4)" in raised.value.message
    assert stub_server.requests == []


@pytest.mark.usefixtures("no_server_env")
def test_the_in_process_client_refuses_unencodable_text() -> None:
    with pytest.raises(RequestValidationError) as raised:
        Client().inference.detect(body=[_item("ok", user_query="why \ud800?")])
    assert raised.value.field == "[0].user_query"
