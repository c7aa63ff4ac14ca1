"""`gdi_text_v1` rows as the OOD metric reads them, checked before any call is made."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from assay.metrics.ood.sut import Prompt
from assay.schema import RequestValidationError

REQUIRED_COLUMNS = ("input_id", "prompt", "sut_response")


@dataclass(frozen=True)
class OODRow:
    """One dataset row.

    input_id: the row's id (also seeds its probe sampling).
    prompt: the in-domain query, a string or a list of {"role", "content"} messages.
    sut_response: the recorded reply to `prompt`, or None to ask the live system under test.
    context: RAG context when the row has one (carried through, not judged).
    """

    input_id: str
    prompt: Prompt
    sut_response: str | None
    context: Any = None


def _messages_in_text(value: str) -> Any:
    """A CSV cell holding a JSON message list, as that list; any other text as itself.

    CSV has no list type, so a conversation prompt arrives as its JSON text; sent as text, the
    system under test would have been asked about the JSON.
    """
    if not value.lstrip().startswith("["):
        return value
    try:
        parsed = json.loads(value)
    except ValueError:
        return value
    # A list of objects is meant as messages: `_prompt` checks each, so a broken one is an error
    # rather than a question about the JSON.
    is_messages = isinstance(parsed, list) and all(isinstance(item, Mapping) for item in parsed)
    return parsed if parsed and is_messages else value


def _prompt(value: Any, where: str) -> Prompt:
    if isinstance(value, str):
        if not value.strip():
            raise RequestValidationError(where, "must not be blank")
        value = _messages_in_text(value)
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value:
        for index, message in enumerate(value):
            if (
                not isinstance(message, Mapping)
                or not isinstance(message.get("role"), str)
                or not isinstance(message.get("content"), str)
            ):
                raise RequestValidationError(
                    f"{where}[{index}]", 'must be a {"role": str, "content": str} message'
                )
            if message["role"] == "user" and not message["content"].strip():
                raise RequestValidationError(f"{where}[{index}].content", "must not be blank")
        if not any(m["role"] == "user" for m in value):
            raise RequestValidationError(where, "has no message with role 'user'")
        return [{"role": m["role"], "content": m["content"]} for m in value]
    raise RequestValidationError(where, "must be a string or a non-empty list of messages")


def parse_rows(rows: Sequence[Mapping[str, Any]]) -> list[OODRow]:
    """Validate every row up front.

    rows: mappings with at least input_id, prompt and sut_response (sut_response may be null
        or blank, meaning "ask the live system under test").

    Raises RequestValidationError naming the row and the missing or bad columns.
    """
    parsed: list[OODRow] = []
    for index, row in enumerate(rows):
        where = f"rows[{index}]"
        if not isinstance(row, Mapping):
            raise RequestValidationError(where, "must be an object")
        missing = [column for column in REQUIRED_COLUMNS if column not in row]
        if missing:
            raise RequestValidationError(where, f"missing required column(s): {', '.join(missing)}")
        response = row["sut_response"]
        if response is not None and not isinstance(response, str):
            raise RequestValidationError(f"{where}.sut_response", "must be a string or null")
        if response is not None and not response.strip():
            # A blank recorded reply is no reply (as an empty CSV cell is): ask the live system
            # rather than judge nothing as an answer.
            response = None
        parsed.append(
            OODRow(
                input_id=str(row["input_id"]),
                prompt=_prompt(row["prompt"], f"{where}.prompt"),
                sut_response=response,
                context=row.get("context"),
            )
        )
    return parsed
