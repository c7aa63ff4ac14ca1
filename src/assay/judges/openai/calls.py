"""One chat-completion call, made robustly: retries with jittered backoff, `retry-after`, timeouts.

Only what is worth retrying is retried: HTTP 429, 5xx, timeouts and connection errors. Anything
else (a 400, a 401, a body that is not JSON) becomes a `JudgeFailure` at once. The answer is kept
as a small `Completion` record, which is also what the judge-call cache stores, so a cached call
and a live one go through the same parsing.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import openai

from assay.judges.openai.settings import LLMSettings
from assay.schema import JudgeFailure

logger = logging.getLogger(__name__)


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
    """

    content: str
    tokens: tuple[TokenLogprob, ...] | None
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int

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
        )


class RequestRejected(JudgeFailure):
    """The endpoint refused the request itself (HTTP 400/404/422): retrying will not help, but a
    simpler request (no JSON schema, no logprobs) might."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__("rejected", f"HTTP {status}: {message}")
        self.status = status


def completion_from_response(response: Any) -> Completion:
    """Read a `ChatCompletion` (SDK object) into a Completion; JudgeFailure if it has no choice."""
    choices = getattr(response, "choices", None) or []
    if not choices:
        raise JudgeFailure("unparseable", "the endpoint returned no choices")
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
    )


def retry_after_seconds(headers: Mapping[str, str] | None) -> float | None:
    """The delay a server asked for in `retry-after-ms` or `retry-after` (seconds or a date)."""
    if headers is None:
        return None
    milliseconds = headers.get("retry-after-ms")
    if milliseconds:
        try:
            return max(0.0, float(milliseconds) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        moment = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, moment.timestamp() - time.time())


def backoff_delay(attempt: int, settings: LLMSettings) -> float:
    """Full-jitter exponential backoff: uniform in [0, min(cap, base * 2**attempt)].

    The jitter spreads retries of many concurrent rows so they do not hit the server together.
    """
    ceiling = min(settings.backoff_cap, settings.backoff_base * (2**attempt))
    return random.uniform(0.0, ceiling)


def _retryable(error: Exception) -> tuple[str, float | None] | None:
    """(failure kind, server-requested delay) when `error` is worth retrying, else None."""
    if isinstance(error, openai.APITimeoutError):
        return "timeout", None
    if isinstance(error, openai.APIConnectionError):
        return "transport", None
    if isinstance(error, openai.APIStatusError):
        status = error.status_code
        if refused_request(error):
            return None
        if status == 429:
            return "rate_limited", retry_after_seconds(error.response.headers)
        if status >= 500:
            return "server_error", retry_after_seconds(error.response.headers)
    return None


def _final_failure(error: Exception) -> JudgeFailure:
    """The JudgeFailure for an error that is not (or no longer) retried."""
    if isinstance(error, openai.APIStatusError):
        detail = _error_detail(error)
        if error.status_code in (400, 404, 422) or refused_request(error):
            return RequestRejected(error.status_code, detail)
        return JudgeFailure("transport", f"HTTP {error.status_code}: {detail}")
    if isinstance(error, openai.APITimeoutError):
        return JudgeFailure("timeout", "the LLM endpoint did not answer in time")
    if isinstance(error, openai.APIConnectionError):
        return JudgeFailure("transport", f"could not reach the LLM endpoint: {error}")
    if isinstance(error, ValueError):  # a 200 whose body is not the JSON it should be
        return JudgeFailure("unparseable", f"the endpoint's response was not valid JSON: {error}")
    return JudgeFailure("judge_error", f"{type(error).__name__}: {error}")


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
    limiter: bounds how many calls are in flight at once.
    deadline: `time.monotonic()` value after which no new attempt is started.
    on_attempt: called as each HTTP attempt starts (for accounting: failed calls count too).

    Raises JudgeFailure (kind "rate_limited", "server_error", "timeout", "transport",
    "unparseable" or "rejected") when every attempt failed or the error is not retryable.
    """
    attempt = 0
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise JudgeFailure("timeout", "the row's time budget ran out before the LLM answered")
        try:
            async with limiter:
                if on_attempt is not None:
                    on_attempt()
                response = await client.chat.completions.create(
                    **request, timeout=min(settings.call_timeout, remaining)
                )
            return completion_from_response(response)
        except JudgeFailure:
            raise
        except Exception as error:
            retry = _retryable(error)
            attempt += 1
            if retry is None or attempt >= settings.max_attempts:
                failure = _final_failure(error)
                if retry is not None:
                    failure = JudgeFailure(
                        retry[0], f"gave up after {attempt} attempts: {failure.message}"
                    )
                raise failure from None
            kind, requested = retry
            delay = backoff_delay(attempt - 1, settings)
            if requested is not None:
                # The server said when to come back; waiting less only earns another 429.
                delay = max(delay, requested)
            if time.monotonic() + delay >= deadline:
                raise JudgeFailure(
                    kind, f"the server asked to wait {delay:.1f}s, past the row's time budget"
                ) from None
            logger.info("LLM call failed (%s); retry %d in %.2fs", kind, attempt, delay)
            await asyncio.sleep(delay)
