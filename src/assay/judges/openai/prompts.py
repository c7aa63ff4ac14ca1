"""The prompts the LLM judge sends, for both strategies.

Both put the fixed text first (the system message, then the query, context and response) and
the instruction-specific part last, so servers that cache prompt prefixes reuse the shared part.
Changing any wording here must bump PROMPT_VERSION: it is part of every cache key.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from assay.judges.base import Question

#: Part of every cache key; bump when a prompt, schema or the way answers are read changes.
PROMPT_VERSION = "assay-llm-judge/1"

Messages = list[dict[str, str]]

SYSTEM = (
    "You are a careful grader of an AI assistant's responses. You are given a user query, "
    "possibly some context documents, the assistant's response, and instructions the response "
    "should follow. For each instruction decide whether the response follows it, using only the "
    "texts given. Answer yes when it follows the instruction and no when it does not."
)

#: Sent once after an answer that could not be read, before giving up on it.
REASK = (
    "Your reply could not be read. Reply again with only the JSON object, one answer "
    'per instruction number, each "yes" or "no".'
)


def inputs_block(question: Question) -> str:
    """The texts under judgement, in a fixed layout shared by every prompt of a row."""
    parts = []
    if question.user_query:
        parts.append(f"User query:\n{question.user_query}")
    if question.context:
        documents = "\n".join(
            f"[{number}] {document}" for number, document in enumerate(question.context, start=1)
        )
        parts.append(f"Context documents:\n{documents}")
    parts.append(f"Response:\n{question.generated_text}")
    return "\n\n".join(parts)


def answer_key(number: int) -> str:
    """JSON key of instruction `number`'s answer (1-based)."""
    return str(number)


def quote_key(number: int) -> str:
    """JSON key of instruction `number`'s supporting quote."""
    return f"{number}_quote"


def fields_messages(questions: Sequence[Question], explain: bool) -> Messages:
    """One prompt asking every instruction of one row and detector, one labelled answer each.

    questions: the instructions to ask, all about the same texts; numbered in this order.
    explain: also ask for a short quote after each answer.
    """
    numbered = "\n".join(
        f"{number}. {question.instruction}" for number, question in enumerate(questions, start=1)
    )
    shown = range(1, min(len(questions), 2) + 1)
    example = {answer_key(n): "yes" if n % 2 else "no" for n in shown}
    how = (
        'Reply with one JSON object only. For each instruction number N, give "N": "yes" if the '
        'response follows instruction N, otherwise "no".'
    )
    if explain:
        how += (
            ' Right after each answer give "N_quote": the few words of the response or the '
            "context that decided it, copied exactly."
        )
        example = {
            key: value
            for n in shown
            for key, value in ((answer_key(n), example[answer_key(n)]), (quote_key(n), "..."))
        }
    shape = ", ".join(f'"{key}": "{value}"' for key, value in example.items())
    rubric = f"Instructions:\n{numbered}\n\n{how} Example: {{{shape}}}"
    user = f"{inputs_block(questions[0])}\n\n{rubric}"
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def fields_schema(count: int, explain: bool) -> dict[str, Any]:
    """JSON schema of the reply to `fields_messages` for `count` instructions."""
    properties: dict[str, Any] = {}
    for number in range(1, count + 1):
        properties[answer_key(number)] = {"type": "string", "enum": ["yes", "no"]}
        if explain:
            properties[quote_key(number)] = {"type": "string"}
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


def instruction_messages(question: Question, explain: bool) -> Messages:
    """One prompt asking a single instruction; the reply starts with the answer word.

    explain: ask for a quote after the answer word (the answer is still the first token).
    """
    ask = "Does the response follow this instruction? Answer with one word, yes or no."
    if explain:
        ask = (
            "Does the response follow this instruction? Start your reply with yes or no, then a "
            "dash, then the few words of the response or context that decided it, copied exactly."
        )
    user = f"{inputs_block(question)}\n\nInstruction: {question.instruction}\n\n{ask}"
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]
