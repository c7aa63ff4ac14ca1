"""Canned OpenAI chat-completion bodies for the loopback stub (fault injection only)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from typing import Any

from conftest import CannedResponse


def _token_entry(token: str, alternatives: dict[str, float]) -> dict[str, Any]:
    return {
        "token": token,
        "logprob": alternatives.get(token, 0.0),
        "bytes": None,
        "top_logprobs": [
            {"token": alt, "logprob": lp, "bytes": None} for alt, lp in alternatives.items()
        ],
    }


def tokens_for(content: str, yes_probabilities: Sequence[float]) -> list[dict[str, Any]]:
    """Split `content` into tokens where each yes/no word is its own token whose alternatives
    give P(yes) = the next value of `yes_probabilities` (in order of appearance)."""
    probabilities = iter(yes_probabilities)
    entries = []
    for piece in re.split(r"(yes|no)", content):
        if not piece:
            continue
        if piece in ("yes", "no"):
            p = next(probabilities)
            alternatives = {"yes": math.log(p), "no": math.log(1 - p), "maybe": math.log(1e-4)}
            entries.append(_token_entry(piece, alternatives))
        else:
            entries.append(_token_entry(piece, {piece: 0.0}))
    return entries


def chat_body(
    content: str,
    yes_probabilities: Sequence[float] | None = None,
    finish_reason: str = "stop",
    usage: tuple[int, int] = (120, 30),
) -> dict[str, Any]:
    """A chat.completion body; with `yes_probabilities`, logprobs for every token."""
    logprobs = None
    if yes_probabilities is not None:
        logprobs = {"content": tokens_for(content, yes_probabilities)}
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 0,
        "model": "stub-model",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
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


def rubric_reply(probabilities: Sequence[float], logprobs: bool = True) -> CannedResponse:
    """A 200 answering a "fields" prompt: instruction N answered yes iff its P(yes) >= 0.5."""
    content = json.dumps(
        {str(n): "yes" if p >= 0.5 else "no" for n, p in enumerate(probabilities, start=1)}
    )
    return CannedResponse(200, chat_body(content, probabilities if logprobs else None))


def ok(body: dict[str, Any]) -> CannedResponse:
    return CannedResponse(200, body)
