"""Keep one item's failure from failing the items it was batched with.

Judges answer many items at once (one encoder call, one micro-batch of concurrent requests), so
an item that makes the backend raise would otherwise take every neighbour down with it. When a
batched call raises, the callers here answer the batch again one item at a time: the items that
were never the problem get their verdicts, and only the guilty item gets a `JudgeFailure`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence

from assay.judges.base import Question, Verdict
from assay.schema import JudgeFailure

logger = logging.getLogger(__name__)

Answers = list[Verdict | JudgeFailure]
#: What makes two Questions belong to the same request item.
ItemKey = tuple[str, str | None, tuple[str, ...]]


def item_key(question: Question) -> ItemKey:
    return (question.generated_text, question.user_query, question.context)


def item_groups(questions: Sequence[Question]) -> list[list[int]]:
    """Indexes of `questions`, grouped by the item they are about, in first-seen order."""
    groups: dict[ItemKey, list[int]] = {}
    for index, question in enumerate(questions):
        groups.setdefault(item_key(question), []).append(index)
    return list(groups.values())


def shutting_down(error: BaseException) -> bool:
    """Whether `error` says the interpreter is shutting down (a run stopped by Ctrl-C, whose
    judge thread went on and could start no more work): no failure of the judge or the item,
    so it is not logged, not retried item by item, and not written as a row's error."""
    return isinstance(error, RuntimeError) and "interpreter shutdown" in str(error)


def failure_of(error: BaseException) -> JudgeFailure:
    """The explicit error an item gets when answering it raised `error`."""
    if isinstance(error, JudgeFailure):
        return error
    return JudgeFailure("judge_error", f"{type(error).__name__}: {error}")


def _checked(answers: Sequence[Verdict | JudgeFailure], expected: int) -> Answers:
    if len(answers) != expected:
        raise RuntimeError(f"judge returned {len(answers)} answers for {expected} questions")
    return list(answers)


def _failed(questions: Sequence[Question], error: Exception) -> Answers:
    failure = failure_of(error)
    logger.warning("judge failed on an item answered on its own: %s", failure)
    return [failure] * len(questions)


def _placed(
    questions: Sequence[Question], answered: Sequence[tuple[list[int], Answers]]
) -> Answers:
    answers: list[Verdict | JudgeFailure | None] = [None] * len(questions)
    for group, got in answered:
        for index, answer in zip(group, got, strict=True):
            answers[index] = answer
    return [a if a is not None else JudgeFailure("judge_error", "no answer") for a in answers]


def answer_each_item_sync(
    call: Callable[[list[Question]], Sequence[Verdict | JudgeFailure]],
    questions: Sequence[Question],
) -> Answers:
    """Answer `questions` with one `call` per item; an item whose call raises (or returns the
    wrong number of answers) gets that error on each of its questions."""
    answered = []
    for group in item_groups(questions):
        subset = [questions[i] for i in group]
        try:
            got = _checked(call(subset), len(subset))
        except Exception as error:
            got = _failed(subset, error)
        answered.append((group, got))
    return _placed(questions, answered)


async def answer_each_item(
    call: Callable[[list[Question]], Awaitable[Sequence[Verdict | JudgeFailure]]],
    questions: Sequence[Question],
) -> Answers:
    """`answer_each_item_sync` for an async `call`. Items are answered one after another, so
    answering a failed batch again adds no more load than the batch itself did."""
    answered = []
    for group in item_groups(questions):
        subset = [questions[i] for i in group]
        try:
            got = _checked(await call(subset), len(subset))
        except Exception as error:
            got = _failed(subset, error)
        answered.append((group, got))
    return _placed(questions, answered)
