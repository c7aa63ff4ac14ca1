"""What a judge backend is: it answers Questions with Verdicts.

A Question is one instruction of one detector about one request item. Backends receive all the
Questions of a request at once so they can batch model work (one encoder call, one LLM prompt).
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass, field

from assay.schema import JudgeFailure


@dataclass(frozen=True)
class Question:
    """One instruction to answer about one item.

    detector: name of the detector asking (e.g. "output_relevance").
    check: the detector's stable id for the instruction (e.g. "core_intent"); backends that
        compute instruction-specific evidence dispatch on it.
    instruction: the instruction text, byte-exact as published.
    generated_text: the response being judged.
    user_query: the user's query, if any.
    context: the context documents, possibly empty.
    explain: whether an explanation is wanted.
    """

    detector: str
    check: str
    instruction: str
    generated_text: str
    user_query: str | None = None
    context: tuple[str, ...] = ()
    explain: bool = False


@dataclass(frozen=True)
class Verdict:
    """A judge's answer: calibrated P(instruction followed), a short explanation, the evidence."""

    follow_probability: float
    explanation: str = ""
    evidence: dict[str, float | str | list[str]] = field(default_factory=dict)


class Judge(abc.ABC):
    """A backend that answers Questions. Implementations must be safe to share across requests."""

    name: str = "judge"

    @abc.abstractmethod
    async def answer(self, questions: Sequence[Question]) -> list[Verdict | JudgeFailure]:
        """Answer every question, in order. A question that cannot be answered gets a
        JudgeFailure in its place, never a made-up probability."""

    def verdict_settings(self) -> dict[str, object]:
        """What decides its verdicts besides the questions and the installed version (an LLM
        judge's model and how it is asked), for the fingerprint of a resumable run."""
        return {}
