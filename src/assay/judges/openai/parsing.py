"""Read the judge model's replies: which answer it gave per instruction, with what probability.

Parsing is tolerant: the reply is read as JSON when it is JSON, and otherwise scanned for
`N: yes`-style pairs, so a reply that is truncated or wrapped in prose still yields whatever
answers it contains. An instruction whose answer cannot be found gets no reading at all (the
judge re-asks once, then reports it unscored); it is never filled in.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from assay.judges.openai.calls import Completion
from assay.judges.openai.logprobs import Answer, answer_of, probability_at, token_probability


@dataclass(frozen=True)
class Reading:
    """One instruction's answer as read from a reply.

    answer: the answer word the model wrote.
    probability: P(yes) from the logprobs at the answer token; None without logprobs.
    quote: the supporting words it gave, if asked and given.
    """

    answer: Answer
    probability: float | None
    quote: str = ""


# `"3": "yes"`, `3: no`, `"3" : "True"` — but not `"3_quote": ...`.
_PAIR = re.compile(r'(?<![\w])"?(\d+)"?\s*[:=]\s*"?\s*(yes|no|true|false)\b', re.IGNORECASE)
_QUOTE = re.compile(r'"(\d+)_quote"\s*:\s*"((?:[^"\\]|\\.)*)', re.DOTALL)


def read_fields(completion: Completion, count: int) -> dict[int, Reading]:
    """Answers to a `fields_messages` prompt, by instruction number (1..count).

    With logprobs, offsets are taken from the concatenated tokens (the text the logprobs belong
    to); each answer's probability is read at its answer token.
    """
    tokens = completion.tokens
    text = "".join(t.token for t in tokens) if tokens else completion.content
    quotes = _quotes(text)
    readings: dict[int, Reading] = {}
    for match in _PAIR.finditer(text):
        number = int(match.group(1))
        if not 1 <= number <= count or number in readings:
            continue
        answer = answer_of(match.group(2))
        if answer is None:
            continue
        probability = probability_at(tokens, match.start(2)) if tokens else None
        if tokens and probability is None:
            continue  # an answer without a readable probability is not an answer
        readings[number] = Reading(answer, probability, quotes.get(number, ""))
    return readings


def _quotes(text: str) -> dict[int, str]:
    """`N_quote` values, from the JSON when it parses, else from whatever was written."""
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    found: dict[int, str] = {}
    if isinstance(data, dict):
        for key, value in data.items():
            if isinstance(key, str) and re.fullmatch(r"\d+_quote", key):
                found[int(key.split("_", 1)[0])] = str(value).strip()
    else:
        for match in _QUOTE.finditer(text):
            try:
                value = json.loads(f'"{match.group(2)}"')
            except ValueError:
                value = match.group(2)  # cut off mid-escape: keep the raw words
            found[int(match.group(1))] = str(value).strip()
    # A quote with no word in it (a copied "..." placeholder) is no evidence.
    return {number: quote for number, quote in found.items() if re.search(r"\w", quote)}


def read_single(completion: Completion) -> Reading | None:
    """The answer to an `instruction_messages` prompt: the reply's first token (or word)."""
    quote = ""
    if "-" in completion.content:
        quote = completion.content.split("-", 1)[1].strip().strip('"')
    if completion.tokens:
        first = completion.tokens[0]
        probability = token_probability(first)
        if probability is None:
            return None
        # The model may open with something else; the listed alternatives still decide.
        answer: Answer = "yes" if probability >= 0.5 else "no"
        return Reading(answer, probability, quote)
    word = re.match(r"\W*(\w+)", completion.content)
    found = answer_of(word.group(1)) if word else None
    return Reading(found, None, quote) if found else None
