"""Verdicts from what the judge model answered: a logprob reading, or sampled votes.

No reading means an explicit failure, never a made-up probability. Verdicts say how they were
reached (`evidence["method"]`) and, when asked, explain themselves quoting the model's evidence.
"""

from __future__ import annotations

from assay.judges.base import Question, Verdict
from assay.judges.openai.calls import BAD_OUTPUT
from assay.judges.openai.parsing import Reading
from assay.judges.usage import record_usage
from assay.schema import JudgeFailure

Answer = Verdict | JudgeFailure


def verdict_from_reading(reading: Reading | None, question: Question, finish_reason: str) -> Answer:
    """A verdict from a logprob reading, or an explicit failure when there is none."""
    if reading is None or reading.probability is None:
        cut = " (the reply was cut off at the token limit)" if finish_reason == "length" else ""
        return JudgeFailure(
            BAD_OUTPUT, f"no readable yes/no answer for {question.check!r} after one re-ask{cut}"
        )
    probability = reading.probability
    evidence: dict[str, float | str | list[str]] = {"method": "logprobs"}
    if reading.quote:
        evidence["quote"] = reading.quote
    explanation = ""
    if question.explain:
        explanation = _explanation(probability >= 0.5, f"P(yes) = {probability:.2f}", reading.quote)
    return Verdict(probability, explanation, evidence)


def verdict_from_votes(readings: list[Reading], question: Question, asked: int) -> Answer:
    """P(yes) as the share of yes among sampled answers; says it came from votes."""
    if not readings:
        return JudgeFailure(
            BAD_OUTPUT, f"none of {asked} sampled answers for {question.check!r} was readable"
        )
    yes = sum(1 for r in readings if r.answer == "yes")
    probability = yes / len(readings)
    record_usage(question, voted=1)
    basis = f"{yes} of {len(readings)} sampled answers were yes; the endpoint gave no logprobs"
    majority = "yes" if yes * 2 >= len(readings) else "no"
    quote = next((r.quote for r in readings if r.quote and r.answer == majority), "")
    evidence: dict[str, float | str | list[str]] = {
        "method": "votes",
        "votes_yes": float(yes),
        "votes": float(len(readings)),
    }
    if quote:
        evidence["quote"] = quote
    explanation = basis if not question.explain else _explanation(probability >= 0.5, basis, quote)
    return Verdict(probability, explanation, evidence)


def _explanation(follows: bool, basis: str, quote: str) -> str:
    verdict = "The response " + ("follows" if follows else "does not follow") + " this instruction"
    evidence = f' Evidence: "{quote}".' if quote else ""
    return f"{verdict} ({basis}).{evidence}"
