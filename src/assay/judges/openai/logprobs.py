"""Turn an answer token's logprobs into P(yes).

P(yes) is normalised over the yes/no answer tokens only: P(yes) / (P(yes) + P(no)), where each
side sums every spelling the server listed (" yes", "Yes", "YES", "true", ...). Mass on other
tokens (punctuation, "maybe") says nothing about the verdict, so it is left out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Literal

from assay.judges.openai.calls import TokenLogprob

Answer = Literal["yes", "no"]

_YES = frozenset({"yes", "true"})
_NO = frozenset({"no", "false"})
# Characters that wrap an answer word inside a token: JSON quotes, spaces, the tokenizer's
# space markers, punctuation after the word.
_WRAPPING = " \t\r\n\"'`.,:;!*_-()[]{}\u2581\u0120"


def answer_of(token: str) -> Answer | None:
    """ "yes"/"no" when `token` spells an answer word (any case, quotes or spaces around)."""
    word = token.strip(_WRAPPING).lower()
    if word in _YES:
        return "yes"
    if word in _NO:
        return "no"
    return None


def yes_probability(alternatives: Mapping[str, float]) -> float | None:
    """P(yes) from {token: logprob}; None when no yes/no spelling is among them."""
    yes = no = 0.0
    for token, logprob in alternatives.items():
        answer = answer_of(token)
        if answer is None or not math.isfinite(logprob):
            continue
        if answer == "yes":
            yes += math.exp(logprob)
        else:
            no += math.exp(logprob)
    if yes + no <= 0.0:
        return None
    return yes / (yes + no)


def token_probability(token: TokenLogprob) -> float | None:
    """P(yes) at one generated position: its alternatives plus the token actually chosen."""
    alternatives = dict(token.top)
    alternatives.setdefault(token.token, token.logprob)
    return yes_probability(alternatives)


def token_offsets(tokens: Sequence[TokenLogprob]) -> list[int]:
    """Start offset of each token in the concatenated token text."""
    offsets = []
    position = 0
    for token in tokens:
        offsets.append(position)
        position += len(token.token)
    return offsets


def probability_at(tokens: Sequence[TokenLogprob], offset: int) -> float | None:
    """P(yes) at the first answer-word token that covers or follows character `offset` of the
    concatenated token text (an answer may share a token with the quote before it)."""
    starts = token_offsets(tokens)
    for token, start in zip(tokens, starts, strict=True):
        if start + len(token.token) <= offset:
            continue
        if answer_of(token.token) is not None:
            return token_probability(token)
        if start > offset + 8:  # well past the answer: the value was not an answer token
            return None
    return None
