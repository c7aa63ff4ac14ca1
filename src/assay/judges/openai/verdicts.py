"""Verdicts from what the judge model answered: a logprob reading, or sampled votes.

No reading means an explicit failure, never a made-up probability; so does a reading whose
answer token held too little yes/no probability ("low_confidence_answer"). Verdicts say how
they were reached (`evidence["method"]`). Label, probability and explanation agree: the
explanation is written from the probability as it goes on the wire (rounded to 4 places), and
when the model's written answer disagrees with that probability the evidence says so and the
run's usage counts it (`disagreements`).
"""

from __future__ import annotations

from assay.judges.base import Question, Verdict
from assay.judges.openai.calls import BAD_OUTPUT
from assay.judges.openai.logprobs import LOW_CONFIDENCE
from assay.judges.openai.parsing import Reading
from assay.judges.usage import record_usage
from assay.schema import JudgeFailure, round_probability

Answer = Verdict | JudgeFailure
Evidence = dict[str, float | str | list[str]]


def verdict_from_reading(
    reading: Reading | None, question: Question, finish_reason: str, min_mass: float
) -> Answer:
    """A verdict from a logprob reading, or an explicit failure.

    finish_reason: the first reply's, to say when it was cut off at the token limit.
    min_mass: the least P(yes) + P(no) at the answer token for the answer to be scored.
    """
    if reading is None:
        cut = " (the reply was cut off at the token limit)" if finish_reason == "length" else ""
        return JudgeFailure(
            BAD_OUTPUT, f"no readable yes/no answer for {question.check!r} after one re-ask{cut}"
        )
    odds = reading.odds
    if odds is None:
        return JudgeFailure(
            BAD_OUTPUT,
            f"the endpoint listed no top_logprobs alternatives at the answer to {question.check!r}",
        )
    if odds.probability is None or odds.mass < min_mass:
        return JudgeFailure(
            LOW_CONFIDENCE,
            f"the answer to {question.check!r} held {odds.mass:.3g} of the probability on yes "
            f"or no at its token, below the minimum of {min_mass:g}: not scored",
        )
    probability = round_probability(odds.probability)
    follows = probability >= 0.5
    evidence: Evidence = {"method": "logprobs", "answer_mass": round_probability(odds.mass)}
    if reading.answer is not None:
        evidence["written_answer"] = reading.answer
    disagreement = ""
    if reading.answer is not None and (reading.answer == "yes") != follows:
        disagreement = f' The model wrote "{reading.answer}" against its own probability.'
        evidence["disagreement"] = f"wrote {reading.answer}, P(yes) = {probability:g}"
        record_usage(question, disagreements=1)
    if reading.quote:
        evidence["quote"] = reading.quote
    explanation = ""
    if question.explain:
        explanation = _explanation(follows, f"P(yes) = {probability:g}", reading.quote)
        explanation += disagreement
    return Verdict(probability, explanation, evidence)


def verdict_from_votes(readings: list[Reading], question: Question, asked: int) -> Answer:
    """P(yes) as the share of yes among sampled answers; says it came from votes."""
    answers = [r.answer for r in readings if r.answer is not None]
    if not answers:
        return JudgeFailure(
            BAD_OUTPUT, f"none of {asked} sampled answers for {question.check!r} was readable"
        )
    yes = sum(1 for answer in answers if answer == "yes")
    probability = round_probability(yes / len(answers))
    record_usage(question, voted=1)
    basis = f"{yes} of {len(answers)} sampled answers were yes; the endpoint lists no logprobs"
    majority = "yes" if probability >= 0.5 else "no"
    quote = next((r.quote for r in readings if r.quote and r.answer == majority), "")
    evidence: Evidence = {"method": "votes", "votes_yes": float(yes), "votes": float(len(answers))}
    if quote:
        evidence["quote"] = quote
    explanation = basis if not question.explain else _explanation(probability >= 0.5, basis, quote)
    return Verdict(probability, explanation, evidence)


def _explanation(follows: bool, basis: str, quote: str) -> str:
    verdict = "The response " + ("follows" if follows else "does not follow") + " this instruction"
    evidence = f' Evidence: "{quote}".' if quote else ""
    return f"{verdict} ({basis}).{evidence}"
