"""CascadeJudge: the embedded judge first, the LLM only where the embedded judge is unsure.

An instruction goes up to the LLM when the embedded probability lies inside the uncertainty band
(inclusive), or when the embedded judge could not answer it. Everything else keeps the embedded
verdict, so a confident rubric costs no LLM call. Each escalation is counted in the run's usage.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from assay.judges.base import Judge, Question, Verdict
from assay.judges.usage import record_usage
from assay.schema import JudgeFailure, RequestValidationError

#: Default uncertainty band: embedded probabilities in here are sent to the LLM.
DEFAULT_BAND = (0.3, 0.7)
BAND_ENV = "ASSAY_CASCADE_BAND"


def band_from_env(environ: Mapping[str, str] | None = None) -> tuple[float, float]:
    """The band from `$ASSAY_CASCADE_BAND` ("low,high", e.g. "0.3,0.7"), else DEFAULT_BAND."""
    raw = (os.environ if environ is None else environ).get(BAND_ENV, "").strip()
    return parse_band(raw, BAND_ENV) if raw else DEFAULT_BAND


def parse_band(raw: str, field: str = "band") -> tuple[float, float]:
    """Read "low,high" into a band; RequestValidationError naming `field` when it is not one."""
    try:
        low, high = (float(part) for part in raw.split(","))
    except ValueError:
        message = f"expected 'low,high' like '0.3,0.7', got {raw!r}"
        raise RequestValidationError(field, message) from None
    if not 0.0 <= low <= high <= 1.0:
        raise RequestValidationError(field, f"need 0 <= low <= high <= 1, got {raw!r}")
    return low, high


class CascadeJudge(Judge):
    """Answer with `first`; re-ask `second` for the uncertain answers.

    first: the cheap judge (the embedded one).
    second: the judge for uncertain instructions (the LLM).
    band: (low, high); a first probability p with low <= p <= high is uncertain.
    """

    name = "cascade"

    def __init__(
        self, first: Judge, second: Judge, band: tuple[float, float] = DEFAULT_BAND
    ) -> None:
        self.first = first
        self.second = second
        self.band = band

    def verdict_settings(self) -> dict[str, object]:
        """What decides its verdicts besides the questions: the band and the second judge's."""
        return {"band": list(self.band), **self.second.verdict_settings()}

    def uncertain(self, answer: Verdict | JudgeFailure) -> bool:
        if isinstance(answer, JudgeFailure):
            return True
        low, high = self.band
        return low <= answer.follow_probability <= high

    async def answer(self, questions: Sequence[Question]) -> list[Verdict | JudgeFailure]:
        answers = list(await self.first.answer(questions))
        escalate = [index for index, answer in enumerate(answers) if self.uncertain(answer)]
        if not escalate:
            return answers
        for index in escalate:
            record_usage(questions[index], escalated=1)
        second = await self.second.answer([questions[index] for index in escalate])
        for index, answer in zip(escalate, second, strict=True):
            before = answers[index]
            if isinstance(answer, Verdict) and isinstance(before, Verdict):
                evidence = dict(answer.evidence)
                evidence["escalated_from"] = round(before.follow_probability, 4)
                answer = Verdict(answer.follow_probability, answer.explanation, evidence)
            answers[index] = answer
        return answers
