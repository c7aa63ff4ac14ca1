"""What an endpoint can do, learned once from a known-good probe request, never from a user row.

A user's row can be refused for reasons of its own (too long for the context window, caught by
a content filter). Reading such a refusal as "this endpoint has no logprobs" or "no structured
output" would change how every later row is judged. So the endpoint layer asks a fixed, tiny
question first: the probe below, in each structured-output form in turn (with logprobs, then
without), and keeps what the first accepted form shows:

- which `response_format` form the endpoint accepts;
- whether its answers list `top_logprobs` alternatives (the judge reads P(yes) from them; an
  endpoint that lists none is judged by sampled votes instead);
- the model the server says answered, which goes into every cache key with the base URL.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from assay.judges.cache import cache_key
from assay.judges.openai.calls import Completion
from assay.judges.openai.settings import LLMSettings

#: The probe's messages. Tests and fakes recognise a probe by PROBE_USER.
PROBE_SYSTEM = "You answer yes/no questions with a JSON object."
PROBE_USER = 'Is the sky blue on a clear day? Reply {"1": "yes"} or {"1": "no"}.'
#: The probe's answer schema: the shape of a one-instruction rubric answer.
PROBE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"1": {"type": "string", "enum": ["yes", "no"]}},
    "required": ["1"],
    "additionalProperties": False,
}
#: Enough for `{"1": "yes"}` in any tokenizer; a model that rambles is cut off, which is fine.
PROBE_MAX_TOKENS = 16
#: The OpenAI SDK's base URL when none is configured.
DEFAULT_BASE_URL = "https://api.openai.com/v1"


@dataclass(frozen=True)
class Capabilities:
    """What the probe found.

    form: the structured-output form the endpoint accepts: "json_schema", "json_object" or
        "none" (plain text).
    logprobs: whether answers list `top_logprobs` alternatives (at least two at some token).
    reported_model: the model the server said answered ("" when it did not say).
    """

    form: str
    logprobs: bool
    reported_model: str

    def to_json(self) -> dict[str, Any]:
        return {"form": self.form, "logprobs": self.logprobs, "reported_model": self.reported_model}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Capabilities:
        return cls(str(data["form"]), bool(data["logprobs"]), str(data.get("reported_model", "")))


def probe_request(settings: LLMSettings, logprobs: bool) -> dict[str, Any]:
    """The probe's `chat.completions.create` arguments, without `response_format`."""
    request: dict[str, Any] = {
        "model": settings.model,
        "messages": [
            {"role": "system", "content": PROBE_SYSTEM},
            {"role": "user", "content": PROBE_USER},
        ],
        "max_tokens": PROBE_MAX_TOKENS,
        "temperature": 0.0,
    }
    if logprobs:
        request |= {"logprobs": True, "top_logprobs": settings.top_logprobs}
    return request


def read_capabilities(completion: Completion, form: str, asked_logprobs: bool) -> Capabilities:
    """Capabilities from the probe's answer in `form`."""
    # One listed alternative per token (or none) gives P(yes) of exactly 0 or 1: not usable.
    listed = completion.tokens is not None and any(len(t.top) >= 2 for t in completion.tokens)
    return Capabilities(form, asked_logprobs and listed, completion.model)


def base_url(settings: LLMSettings) -> str:
    """The endpoint's API root as the SDK calls it, without a trailing slash."""
    return (settings.base_url or DEFAULT_BASE_URL).rstrip("/")


def identity(settings: LLMSettings, capabilities: Capabilities) -> dict[str, str]:
    """Who answers: the base URL, the model asked for and the model the server reported."""
    return {
        "base_url": base_url(settings),
        "model": settings.model,
        "reported_model": capabilities.reported_model,
    }


def record_key(settings: LLMSettings) -> str:
    """Cache key under which the last probe's findings are kept for `--dry-run` estimates (which
    make no call, so cannot probe). Judging never reads it: every process probes afresh."""
    return "endpoint:" + cache_key({"base_url": base_url(settings), "model": settings.model})
