"""One chat-completion call, made robustly: the shared retry policy (`assay.retries`: jittered
backoff, `retry-after` honoured), per-call timeouts and the error kinds every LLM user reports.

Only what is worth retrying is retried: HTTP 429, 5xx, timeouts and connection errors. Anything
else (a 400, a 401, a body that is not JSON) becomes a `JudgeFailure` at once. Failure kinds are
the same for every caller (the LLM judge, the OOD judge, the OOD generator): "timeout",
"rate_limited", "transport" (no usable HTTP answer: connection, 5xx, a refused request),
"bad_output" (an answer that cannot be read), and two that belong to one request's input rather
than to the endpoint: "input_too_long" (the prompt does not fit the model's context window) and
"content_filtered" (the provider's content filter refused the input or cut the answer). The
judge adds "low_confidence_answer" (`logprobs.py`). The answer is kept as a small `Completion`
record, which is also what the call cache stores, so a cached call and a live one read the same.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import openai

from assay.judges.openai.settings import LLMSettings
from assay.retries import GaveUp, Retryable, retry, retry_after_seconds
from assay.schema import JudgeFailure

#: The failure kinds of an LLM call, shared by everything that calls one.
TIMEOUT, RATE_LIMITED, TRANSPORT, BAD_OUTPUT = "timeout", "rate_limited", "transport", "bad_output"
#: Failure kinds that belong to one request's input: that row fails, nothing else changes.
INPUT_TOO_LONG, CONTENT_FILTERED = "input_too_long", "content_filtered"

#: How providers word a prompt that does not fit (OpenAI and llama-cpp-python send the code
#: `context_length_exceeded`; vLLM, Ollama and others only say it in the message).
_TOO_LONG = re.compile(
    r"context[ _-]?length|context window|maximum context|too many tokens|n_ctx"
    r"|(?:prompt|input) is too long|`?inputs?`? tokens",
    re.IGNORECASE,
)
_FILTERED = re.compile(r"content[ _-]?(?:filter|management|policy)|safety system", re.IGNORECASE)


@dataclass(frozen=True)
class TokenLogprob:
    """One generated token, its log-probability and the alternatives the server listed."""

    token: str
    logprob: float
    top: dict[str, float]


@dataclass(frozen=True)
class Completion:
    """What the judge keeps of a chat completion.

    content: the message text.
    tokens: per generated token, its logprobs; None when the endpoint returned none.
    finish_reason: "stop", "length", ...
    prompt_tokens / completion_tokens: the usage the server reported (0 when it reported none).
    model: the model the server says answered ("" when it did not say).
    """

    content: str
    tokens: tuple[TokenLogprob, ...] | None
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    model: str = ""

    def to_json(self) -> dict[str, Any]:
        tokens = None
        if self.tokens is not None:
            tokens = [[t.token, t.logprob, t.top] for t in self.tokens]
        return {
            "content": self.content,
            "tokens": tokens,
            "finish_reason": self.finish_reason,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "model": self.model,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Completion:
        raw_tokens = data.get("tokens")
        tokens = None
        if raw_tokens is not None:
            tokens = tuple(TokenLogprob(str(t), float(lp), dict(top)) for t, lp, top in raw_tokens)
        return cls(
            content=str(data["content"]),
            tokens=tokens,
            finish_reason=str(data.get("finish_reason") or ""),
            prompt_tokens=int(data.get("prompt_tokens") or 0),
            completion_tokens=int(data.get("completion_tokens") or 0),
            model=str(data.get("model") or ""),
        )


class RequestRejected(JudgeFailure):
    """The endpoint refused the request itself (HTTP 400/404/422, or llama-cpp-python's 500 for
    an unsupported `response_format`): retrying the same request will not help.

    Its kind says why, as far as the answer tells: "input_too_long" (context length exceeded),
    "content_filtered", or "transport" for any other refusal. Only the endpoint's capability
    probe reads a refusal as "this form is not supported"; a refused user row is that row's
    error and nothing else.
    """

    def __init__(self, status: int, message: str, code: str | None = None) -> None:
        super().__init__(rejection_kind(message, code), f"HTTP {status}: {message}")
        self.status = status


def rejection_kind(message: str, code: str | None) -> str:
    """The failure kind of a refused request, from the provider's error code and message."""
    text = f"{code or ''} {message}"
    if _TOO_LONG.search(text):
        return INPUT_TOO_LONG
    if _FILTERED.search(text):
        return CONTENT_FILTERED
    return TRANSPORT


def completion_from_response(response: Any) -> Completion:
    """Read a `ChatCompletion` (SDK object) into a Completion; JudgeFailure if it has no choice."""
    choices = getattr(response, "choices", None) or []
    if not choices:
        raise JudgeFailure(BAD_OUTPUT, "the endpoint returned no choices")
    choice = choices[0]
    content = (choice.message.content if choice.message is not None else None) or ""
    tokens: tuple[TokenLogprob, ...] | None = None
    logprobs = getattr(choice, "logprobs", None)
    entries = getattr(logprobs, "content", None) if logprobs is not None else None
    if entries:
        tokens = tuple(
            TokenLogprob(
                entry.token,
                float(entry.logprob),
                {alt.token: float(alt.logprob) for alt in (entry.top_logprobs or [])},
            )
            for entry in entries
        )
    usage = getattr(response, "usage", None)
    return Completion(
        content=content,
        tokens=tokens,
        finish_reason=str(choice.finish_reason or ""),
        prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
        completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
        model=str(getattr(response, "model", "") or ""),
    )


def _classify(error: Exception) -> Retryable | None:
    """A Retryable when `error` is worth another attempt, else None."""
    if isinstance(error, openai.APITimeoutError):
        return Retryable(TIMEOUT)
    if isinstance(error, openai.APIConnectionError):
        return Retryable(TRANSPORT)
    if isinstance(error, openai.APIStatusError):
        if refused_request(error):
            return None
        if error.status_code == 429:
            return Retryable(RATE_LIMITED, retry_after_seconds(error.response.headers))
        if error.status_code >= 500:
            return Retryable(TRANSPORT, retry_after_seconds(error.response.headers))
    return None


class Unreachable(JudgeFailure):
    """No connection could be made at all (nothing listening, a wrong host): unlike an HTTP
    error or a timeout, nothing there is about to answer."""


class NotAllowed(JudgeFailure):
    """The endpoint refused the API key (HTTP 401) or its access (403): every call will be
    refused the same way until the setting changes."""


def _final_failure(error: Exception, call_timeout: float) -> JudgeFailure:
    """The JudgeFailure for an error that is not (or no longer) retried (call_timeout: the
    setting a timed-out call ran out of, named in its message)."""
    if isinstance(error, openai.APIStatusError):
        detail = _error_detail(error)
        if error.status_code in (400, 404, 422) or refused_request(error):
            return RequestRejected(error.status_code, detail, error.code)
        if error.status_code in (401, 403):
            what = "refused the API key" if error.status_code == 401 else "refused access"
            return NotAllowed(
                TRANSPORT,
                f"HTTP {error.status_code}: {detail}: the LLM endpoint {what}; check "
                "ASSAY_LLM_API_KEY (or --llm api_key=...) and that the key may use the model",
            )
        return JudgeFailure(TRANSPORT, f"HTTP {error.status_code}: {detail}")
    if isinstance(error, openai.APITimeoutError):
        return JudgeFailure(
            TIMEOUT,
            f"the LLM endpoint{_at(error)} did not answer in time (call_timeout "
            f"{call_timeout:g}s; raise it with ASSAY_LLM_TIMEOUT or --llm call_timeout=...)",
        )
    if isinstance(error, openai.APIConnectionError):
        return Unreachable(TRANSPORT, f"could not reach the LLM endpoint{_at(error)}: {error}")
    if isinstance(error, JudgeFailure):
        return error
    if isinstance(error, ValueError):  # a 200 whose body is not the JSON it should be
        return JudgeFailure(BAD_OUTPUT, f"the endpoint's response was not valid JSON: {error}")
    return JudgeFailure("judge_error", f"{type(error).__name__}: {error}")


def _at(error: openai.APIConnectionError) -> str:
    """ " at <url>" for the request that failed (a wrong or default base URL shows here)."""
    request = getattr(error, "request", None)
    return f" at {request.url}" if request is not None else ""


def refused_request(error: openai.APIStatusError) -> bool:
    """A 5xx that is really a refusal of the request's form. llama-cpp-python answers an
    unsupported `response_format` with HTTP 500 and a validation error: retrying cannot help."""
    detail = _error_detail(error)
    return error.status_code >= 500 and "validation error" in detail and "response_format" in detail


def _error_detail(error: openai.APIStatusError) -> str:
    try:
        text = error.response.text
    except Exception:  # a streamed or closed body; the SDK's message is enough
        text = ""
    return " ".join((text or error.message).split())[:300]


async def call_with_retries(
    client: openai.AsyncOpenAI,
    request: dict[str, Any],
    settings: LLMSettings,
    limiter: asyncio.Semaphore,
    deadline: float,
    on_attempt: Callable[[], None] | None = None,
) -> Completion:
    """Make one chat-completion call, retrying what is worth retrying.

    client: an AsyncOpenAI client with the SDK's own retries turned off.
    request: keyword arguments of `chat.completions.create`.
    settings: attempts, backoff and timeouts.
    limiter: bounds how many calls are in flight at once (held per attempt, not while waiting).
    deadline: `time.monotonic()` value after which no new attempt is started.
    on_attempt: called as each HTTP attempt starts (for accounting: failed calls count too).

    Raises JudgeFailure (kind "timeout", "rate_limited", "transport" or "bad_output"; a
    RequestRejected, kind "input_too_long", "content_filtered" or "transport", when the endpoint
    refused the request) when every attempt failed or the failure is not worth retrying.
    """

    async def attempt() -> Completion:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise JudgeFailure(TIMEOUT, "the row's time budget ran out before the LLM answered")
        async with limiter:
            if on_attempt is not None:
                on_attempt()
            response = await client.chat.completions.create(
                **request, timeout=min(settings.call_timeout, remaining)
            )
        return completion_from_response(response)

    try:
        return await retry(
            attempt, settings.retry_policy(), _classify, deadline=deadline, what="LLM call"
        )
    except GaveUp as gave_up:
        failure = _final_failure(gave_up.error, settings.call_timeout)
        if gave_up.retry is None:
            raise failure from None
        # The same class as the last attempt's failure: an endpoint no attempt could connect to
        # stays `Unreachable`.
        failure_class = Unreachable if isinstance(failure, Unreachable) else JudgeFailure
        if gave_up.out_of_time:
            raise failure_class(
                gave_up.retry.kind,
                f"the next retry would pass the row's time budget: {failure.message}",
            ) from None
        tries = "1 attempt" if gave_up.attempts == 1 else f"{gave_up.attempts} attempts"
        message = f"gave up after {tries}: {failure.message}"
        raise failure_class(gave_up.retry.kind, message) from None
