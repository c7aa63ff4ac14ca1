"""Micro-batching: concurrent callers share one backend call and each gets its own answers."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from assay.judges import Judge, Question, Verdict
from assay.judges.batching import BatchingJudge
from assay.schema import JudgeFailure


class _Recording(Judge):
    """Answers each question with its own text, and records the size of every call."""

    name = "recording"

    def __init__(self, fail: bool = False) -> None:
        self.calls: list[int] = []
        self.fail = fail

    async def answer(self, questions: Sequence[Question]) -> list[Verdict | JudgeFailure]:
        self.calls.append(len(questions))
        if self.fail:
            raise RuntimeError("backend exploded")
        return [Verdict(0.5, explanation=q.generated_text) for q in questions]


def _questions(caller: int, count: int) -> list[Question]:
    return [
        Question("output_relevance", "core_intent", "i", generated_text=f"caller {caller} q {n}")
        for n in range(count)
    ]


async def _ask_concurrently(
    judge: BatchingJudge, callers: int
) -> list[list[Verdict | JudgeFailure]]:
    return await asyncio.gather(*(judge.answer(_questions(c, c + 1)) for c in range(callers)))


def test_concurrent_callers_share_one_backend_call() -> None:
    inner = _Recording()
    # A generous window: all callers queue within one event-loop pass, long before it closes.
    judge = BatchingJudge(inner, window_seconds=0.5)
    answers = asyncio.run(_ask_concurrently(judge, 8))
    assert inner.calls == [sum(range(1, 9))]
    assert judge.batches == 1
    for caller, verdicts in enumerate(answers):
        assert [v.explanation for v in verdicts if isinstance(v, Verdict)] == [
            f"caller {caller} q {n}" for n in range(caller + 1)
        ]


def test_batches_stop_growing_at_max_questions() -> None:
    inner = _Recording()
    judge = BatchingJudge(inner, window_seconds=0.5, max_questions=10)
    asyncio.run(_ask_concurrently(judge, 8))  # 36 questions in callers of 1..8
    assert sum(inner.calls) == 36
    assert len(inner.calls) > 1
    assert all(size < 10 + 8 for size in inner.calls)


def test_a_failing_backend_fails_every_caller_explicitly_and_keeps_working() -> None:
    inner = _Recording(fail=True)
    judge = BatchingJudge(inner, window_seconds=0.01)
    answers = asyncio.run(_ask_concurrently(judge, 3))
    for verdicts in answers:
        assert all(isinstance(v, JudgeFailure) and v.kind == "judge_error" for v in verdicts)
        assert "backend exploded" in str(verdicts[0])
    inner.fail = False
    [again] = asyncio.run(_ask_concurrently(judge, 1))
    assert isinstance(again[0], Verdict)


class _Fragile(_Recording):
    """Raises for any call that includes a question about "poison" (as a tokenizer does for a
    text it cannot encode), answers every other call."""

    async def answer(self, questions: Sequence[Question]) -> list[Verdict | JudgeFailure]:
        self.calls.append(len(questions))
        if any("poison" in q.generated_text for q in questions):
            raise TypeError("cannot encode this text")
        return [Verdict(0.5, explanation=q.generated_text) for q in questions]


def test_a_poisoned_item_fails_alone_and_its_batch_neighbours_are_answered() -> None:
    inner = _Fragile()
    judge = BatchingJudge(inner, window_seconds=0.5)

    async def ask() -> list[list[Verdict | JudgeFailure]]:
        callers = [_questions(c, 2) for c in range(6)]
        callers[3] = callers[3][:1] + [
            Question("output_relevance", "core_intent", "i", generated_text="poison")
        ]
        return await asyncio.gather(*(judge.answer(questions) for questions in callers))

    answers = asyncio.run(ask())
    assert inner.calls[0] == 12  # all six callers were in one batch, which raised
    assert judge.batches == 1
    for caller, verdicts in enumerate(answers):
        if caller == 3:
            assert isinstance(verdicts[0], Verdict)  # same caller, other item: answered
            assert isinstance(verdicts[1], JudgeFailure) and verdicts[1].kind == "judge_error"
            assert "TypeError: cannot encode this text" in verdicts[1].message
        else:
            assert [v.explanation for v in verdicts if isinstance(v, Verdict)] == [
                f"caller {caller} q {n}" for n in range(2)
            ]


def test_empty_question_list_needs_no_backend_call() -> None:
    inner = _Recording()
    assert asyncio.run(BatchingJudge(inner).answer([])) == []
    assert inner.calls == []


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--database-url", "sqlite:///x.db"], "no API keys configured"),
        (["--no-auth", "--database-url", "nosuchdb://x"], "database URL 'nosuchdb://x'"),
        (["--api-keys-file", "missing.txt"], "API keys file 'missing.txt' cannot be read"),
    ],
)
def test_serve_configuration_errors_are_one_clear_line(
    tmp_path: Path, arguments: list[str], message: str
) -> None:
    finished = subprocess.run(
        [sys.executable, "-m", "assay.cli", "serve", *arguments],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin"},
        cwd=str(tmp_path),
    )
    assert finished.returncode == 2  # the user's to fix: unusable input
    assert message in finished.stderr
    assert "Traceback" not in finished.stderr
    assert len(finished.stderr.strip().splitlines()) == 1
