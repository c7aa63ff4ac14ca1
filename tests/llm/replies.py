"""Canned OpenAI chat-completion bodies for the loopback stub (fault injection and logprob
shapes a real server will not produce on demand)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Collection, Sequence
from typing import Any

from assay.judges.openai.probe import PROBE_USER
from conftest import CannedResponse, Route

#: A token and its listed alternatives {token: logprob} (the token itself among them or not).
Token = tuple[str, dict[str, float]]


def answer_token(text: str, p_yes: float, mass: float = 1.0) -> Token:
    """A token at an answer position: P(yes)/(P(yes)+P(no)) = p_yes, with yes and no holding
    `mass` of the probability and an apology ("I") the rest. The token itself is listed under
    the answer it spells."""
    word = text.strip(' "').lower()
    yes, no = (text if word == "yes" else "yes"), (text if word == "no" else "no")
    alternatives = {yes: math.log(p_yes * mass), no: math.log((1 - p_yes) * mass)}
    if mass < 1:
        alternatives["I"] = math.log(1 - mass)
    else:
        alternatives["maybe"] = math.log(1e-4)
    return text, alternatives


def plain(text: str) -> Token:
    """A token that is certain and no answer."""
    return text, {text: 0.0}


def _entry(token: Token) -> dict[str, Any]:
    text, alternatives = token
    return {
        "token": text,
        "logprob": alternatives.get(text, -0.01),
        "bytes": None,
        "top_logprobs": [
            {"token": alt, "logprob": lp, "bytes": None} for alt, lp in alternatives.items()
        ],
    }


def tokens_for(content: str, yes_probabilities: Sequence[float]) -> list[Token]:
    """Split `content` into tokens where each yes/no word is its own token whose alternatives
    give P(yes) = the next value of `yes_probabilities` (in order of appearance)."""
    probabilities = iter(yes_probabilities)
    tokens = []
    for piece in re.split(r"(yes|no)", content):
        if piece in ("yes", "no"):
            tokens.append(answer_token(piece, next(probabilities)))
        elif piece:
            tokens.append(plain(piece))
    return tokens


def token_body(
    tokens: Sequence[Token] | None,
    content: str | None = None,
    finish_reason: str = "stop",
    usage: tuple[int, int] = (120, 30),
    model: str = "stub-model",
) -> dict[str, Any]:
    """A chat.completion body; its content is the tokens' text unless given."""
    text = content if content is not None else "".join(t for t, _ in tokens or ())
    logprobs = {"content": [_entry(t) for t in tokens]} if tokens is not None else None
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": logprobs,
                "finish_reason": finish_reason,
            }
        ],
        "usage": {
            "prompt_tokens": usage[0],
            "completion_tokens": usage[1],
            "total_tokens": sum(usage),
        },
    }


def chat_body(
    content: str,
    yes_probabilities: Sequence[float] | None = None,
    finish_reason: str = "stop",
    usage: tuple[int, int] = (120, 30),
) -> dict[str, Any]:
    """A chat.completion body; with `yes_probabilities`, logprobs for every token."""
    tokens = tokens_for(content, yes_probabilities) if yes_probabilities is not None else None
    return token_body(tokens, content, finish_reason, usage)


def rubric_reply(
    probabilities: Sequence[float], logprobs: bool = True, explain: bool = False
) -> CannedResponse:
    """A 200 answering a "fields" prompt: instruction N answered yes iff its P(yes) >= 0.5
    (with a quote after each answer when `explain`)."""
    answers: dict[str, str] = {}
    for number, p in enumerate(probabilities, start=1):
        answers[str(number)] = "yes" if p >= 0.5 else "no"
        if explain:
            answers[f"{number}_quote"] = f"six minutes {number}"
    return CannedResponse(200, chat_body(json.dumps(answers), probabilities if logprobs else None))


def ok(body: dict[str, Any]) -> CannedResponse:
    return CannedResponse(200, body)


def is_probe(body: Any) -> bool:
    """Whether a request body is the LLM layer's capability probe."""
    messages = body.get("messages") if isinstance(body, dict) else None
    return bool(messages) and messages[-1].get("content") == PROBE_USER


def probe_answer(
    *,
    listed: int = 3,
    logprobs: bool = True,
    model: str = "stub-model",
    refuse_forms: Collection[str] = (),
    refuse_logprobs: bool = False,
) -> Route:
    """A stub `probe` hook answering the capability probe like an endpoint that:

    listed: lists this many top_logprobs alternatives per token (0: an empty list);
    logprobs: returns logprobs at all;
    model: reports this model;
    refuse_forms: refuses these `response_format` types with a 422;
    refuse_logprobs: refuses any request asking for logprobs with a 400.
    """

    def answer(body: Any) -> CannedResponse | None:
        if not is_probe(body):
            return None
        form = (body.get("response_format") or {}).get("type", "none")
        if form in refuse_forms:
            return CannedResponse(422, {"detail": f"response_format.type: {form} not allowed"})
        if refuse_logprobs and body.get("logprobs"):
            error = {"message": "logprobs is not supported with this model", "code": None}
            return CannedResponse(400, {"error": error})
        names = ["yes", "no", "maybe", "Yes", "No"][:listed]
        tokens = [
            plain('{"1": "'),
            ("yes", {name: math.log(0.9 if name == "yes" else 0.02) for name in names}),
            plain('"}'),
        ]
        return CannedResponse(200, token_body(tokens if logprobs else None, model=model))

    return answer


def route_by_response(replies: dict[str, CannedResponse]) -> Route:
    """A stub `route` answering each row by a text in its `<response>` block."""

    def answer(body: Any) -> CannedResponse | None:
        response = body["messages"][1]["content"].split("<response>")[1]
        for marker, reply in replies.items():
            if marker in response:
                return reply
        return None

    return answer
