"""Turn the logprobs at an answer token into P(yes), and say how much the model meant it.

P(yes) is normalised over the yes/no answers only: P(yes) / (P(yes) + P(no)), where each side
sums every spelling the server listed at that position (" yes", "Yes", "YES", "true", and the
first pieces of a split word such as "y" or "n"). Mass on other tokens (punctuation, "maybe",
"I'm sorry") says nothing about the verdict, so it is left out of the ratio, but it is kept as
`mass`: an answer where yes and no together hold less than `LLMSettings.min_answer_mass` (0.5
by default) is not scored (kind "low_confidence_answer"), because a ratio of two near-zero
numbers is noise, not a probability.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from assay.judges.openai.calls import TokenLogprob

Answer = Literal["yes", "no"]

#: The judge's own failure kind: the answer token held too little yes/no probability to score.
LOW_CONFIDENCE = "low_confidence_answer"

_YES = ("yes", "true")
_NO = ("no", "false")
# Characters that wrap an answer word inside a token: JSON quotes, spaces, the tokenizer's
# space markers, punctuation after the word.
_WRAPPING = " \t\r\n\"'`.,:;!*_-()[]{}\u2581\u0120"


def answer_of(token: str, partial: bool = False) -> Answer | None:
    """ "yes"/"no" when `token` spells an answer word (any case, quotes or spaces around).

    partial: also take the first piece of a split word ("y", "ye", "n", "tr", "fa") at a
    position known to hold the answer; only unambiguous pieces count.
    """
    word = token.strip(_WRAPPING).lower()
    if word in _YES:
        return "yes"
    if word in _NO:
        return "no"
    if partial and word:
        yes = any(spelling.startswith(word) for spelling in _YES)
        no = any(spelling.startswith(word) for spelling in _NO)
        if yes != no:
            return "yes" if yes else "no"
    return None


@dataclass(frozen=True)
class Odds:
    """What one answer position says.

    probability: P(yes) / (P(yes) + P(no)); None when no yes/no spelling was listed.
    mass: P(yes) + P(no), the share of the position's probability on an answer at all.
    """

    probability: float | None
    mass: float


def yes_probability(alternatives: Mapping[str, float], partial: bool = False) -> Odds:
    """P(yes) and the yes/no mass from {token: logprob}."""
    yes = no = 0.0
    for token, logprob in alternatives.items():
        answer = answer_of(token, partial)
        if answer is None or not math.isfinite(logprob):
            continue
        if answer == "yes":
            yes += math.exp(logprob)
        else:
            no += math.exp(logprob)
    if yes + no <= 0.0:
        return Odds(None, 0.0)
    return Odds(yes / (yes + no), min(yes + no, 1.0))


def answer_odds(token: TokenLogprob) -> Odds | None:
    """P(yes) at one generated position known to hold the answer: its listed alternatives plus
    the token chosen. None when the server listed no alternatives there (one token alone would
    make P(yes) exactly 0 or 1)."""
    if not token.top:
        return None
    alternatives = dict(token.top)
    alternatives.setdefault(token.token, token.logprob)
    return yes_probability(alternatives, partial=True)


def token_at(tokens: Sequence[TokenLogprob], offset: int) -> TokenLogprob | None:
    """The token covering character `offset` of the concatenated token text."""
    position = 0
    for token in tokens:
        end = position + len(token.token)
        if position <= offset < end:
            return token
        position = end
    return None
