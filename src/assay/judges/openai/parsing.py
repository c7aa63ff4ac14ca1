"""Read the judge model's replies: which answer it wrote per instruction, and the probability
read at that answer's own token.

A "fields" reply is parsed as JSON, member by member, keeping the character span of each
value. Instruction N's answer is the value of key "N" and nothing else: a quote, an explanation
or a copied rubric that happens to contain "2: no" is never read as an answer. With logprobs,
the answer's probability comes from the token that holds the first character of that value
(the concatenated tokens are the text parsed, so offsets line up). A reply cut off mid-object
still yields the members that were complete; an answer that is missing, written twice or not
yes/no gets no reading (the judge re-asks once, then reports it unscored). Nothing is filled in.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from assay.judges.openai.calls import Completion
from assay.judges.openai.logprobs import Answer, Odds, answer_odds, answer_of, token_at
from assay.judges.openai.prompts import answer_key, quote_key


@dataclass(frozen=True)
class Reading:
    """One instruction's answer as read from a reply.

    answer: the answer word the model wrote; None when its first token was no answer word
        (a per-instruction reply that opens with something else).
    odds: P(yes) and yes/no mass at the answer token; None without logprobs, or when the
        server listed no alternatives there.
    quote: the supporting words it gave, if asked and given.
    """

    answer: Answer | None
    odds: Odds | None
    quote: str = ""


@dataclass(frozen=True)
class Member:
    """One top-level member of a JSON object: its key, value, and where the value starts."""

    key: str
    value: Any
    start: int


_DECODER = json.JSONDecoder(strict=False)  # raw newlines inside a quote are common and harmless


def _skip_space(text: str, position: int) -> int:
    while position < len(text) and text[position] in " \t\r\n":
        position += 1
    return position


def json_members(text: str) -> list[Member]:
    """The members of the JSON object that starts at the first `{` of `text` (a code fence or
    words before it are skipped), in order, up to the end of the object or the first thing that
    is not valid JSON (a cut-off reply)."""
    position = text.find("{")
    if position < 0:
        return []
    members: list[Member] = []
    position += 1
    while True:
        position = _skip_space(text, position)
        if position >= len(text) or text[position] == "}":
            return members
        if members:
            if text[position] != ",":
                return members
            position = _skip_space(text, position + 1)
        if position >= len(text) or text[position] != '"':
            return members
        try:
            key, position = _DECODER.raw_decode(text, position)  # a string: the check above
        except ValueError:
            return members
        position = _skip_space(text, position)
        if position >= len(text) or text[position] != ":":
            return members
        start = _skip_space(text, position + 1)
        try:
            value, position = _DECODER.raw_decode(text, start)
        except ValueError:
            return members
        members.append(Member(key, value, start))


def read_fields(completion: Completion, count: int) -> dict[int, Reading]:
    """Answers to a `fields_messages` prompt, by instruction number (1..count)."""
    tokens = completion.tokens
    text = "".join(t.token for t in tokens) if tokens else completion.content
    members: dict[str, list[Member]] = {}
    for member in json_members(text):
        members.setdefault(member.key, []).append(member)
    readings: dict[int, Reading] = {}
    for number in range(1, count + 1):
        found = members.get(answer_key(number), [])
        if len(found) != 1:
            continue  # missing, or written twice (which one would count?)
        member = found[0]
        answer = _answer_value(member.value)
        if answer is None:
            continue
        odds = None
        if tokens:
            # A string's first character follows its opening quote; true/false start at once.
            first = member.start + 1 if isinstance(member.value, str) else member.start
            token = token_at(tokens, first)
            odds = answer_odds(token) if token is not None else None
        readings[number] = Reading(answer, odds, _quote(members.get(quote_key(number), [])))
    return readings


def _answer_value(value: Any) -> Answer | None:
    if isinstance(value, bool):
        return "yes" if value else "no"
    return answer_of(value) if isinstance(value, str) else None


def _quote(found: list[Member]) -> str:
    if len(found) != 1 or not isinstance(found[0].value, str):
        return ""
    quote = found[0].value.strip()
    # A quote with no word in it (a copied "..." placeholder) is no evidence.
    return quote if re.search(r"\w", quote) else ""


def read_single(completion: Completion) -> Reading | None:
    """The answer to an `instruction_messages` prompt: the reply's first token (or word)."""
    quote = ""
    if "-" in completion.content:
        quote = completion.content.split("-", 1)[1].strip().strip('"')
    if completion.tokens:
        first = completion.tokens[0]
        # The model may open with something else; the listed alternatives still decide if
        # they hold enough of the probability (the verdict checks the mass).
        return Reading(answer_of(first.token, partial=True), answer_odds(first), quote)
    word = re.match(r"\W*(\w+)", completion.content)
    found = answer_of(word.group(1)) if word else None
    return Reading(found, None, quote) if found else None
