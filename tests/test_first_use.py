"""What happens on a process's first detect calls: models load once, and off the event loop.

From a walkthrough: six threads making their first call at once each built the agreement model
(1.3 GB instead of 433 MB), and an AsyncClient's first in-process call stalled its event loop
for the whole model load.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence

import pytest

from assay.detectors.evaluate import detect_items, parse_items
from assay.judges import Judge, Question, Verdict, register_judge
from assay.judges import _factories as factories  # test-only: remove the judge registered here
from assay.judges import _instances as instances
from assay.judges.embedded import agreement_model
from assay.schema import JudgeFailure


class CountingModel:
    built = 0

    def __init__(self) -> None:
        time.sleep(0.2)  # long enough for every thread to ask while the first one builds
        CountingModel.built += 1


@pytest.fixture
def counting_model(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    agreement_model._loaded.cache_clear()
    monkeypatch.setattr(agreement_model, "AgreementModel", CountingModel)
    yield
    agreement_model._loaded.cache_clear()  # the next real use loads the real model


def test_threads_asking_at_once_build_the_agreement_model_once(counting_model: None) -> None:
    got: list[object] = []
    threads = [
        threading.Thread(target=lambda: got.append(agreement_model.load_agreement_model()))
        for _ in range(6)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert CountingModel.built == 1 and len({id(model) for model in got}) == 1


class RecordingJudge(Judge):
    built_on: list[str] = []

    def __init__(self) -> None:
        RecordingJudge.built_on.append(threading.current_thread().name)

    async def answer(self, questions: Sequence[Question]) -> list[Verdict | JudgeFailure]:
        return [Verdict(0.9) for _ in questions]


async def test_a_judge_is_built_off_the_event_loop() -> None:
    register_judge("recording", RecordingJudge)
    try:
        item = {
            "user_query": "q",
            "generated_text": "an answer",
            "config": {"output_relevance": {}},
        }
        await detect_items(parse_items([item]), judge="recording")
    finally:
        factories.pop("recording", None)
        instances.pop("recording", None)
    assert RecordingJudge.built_on and RecordingJudge.built_on[0] != threading.current_thread().name
