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
