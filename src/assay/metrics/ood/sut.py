"""Adapters for the system under test (SUT), and the retrying, time-limited call around them.

An adapter turns a prompt (a string, or a list of {"role", "content"} messages) into the SUT's
reply text, raising `SUTError` when it cannot. `ask_with_retries` adds the per-call timeout,
the retries (the shared policy of `assay.retries`: backoff with jitter, the SUT's `retry-after`
honoured) and the shared concurrency limit, and records a transport failure as such instead of
raising, so it can be reported apart from the SUT's behaviour.
"""

from __future__ import annotations

import abc
import asyncio
import inspect
import json
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import httpx

from assay._sync import in_daemon_thread
from assay.metrics.ood.sut_errors import (
    OPENAI_API_ROOT_HINT,
    OPENAI_KIND_HINT,
    SUTError,
    http_kind_hint,
    reply_at,
    setting,
    string_paths,
)
from assay.retries import GaveUp, Retryable, RetryPolicy, retry, retry_after_seconds
from assay.schema import valid_text

__all__ = ["SUTError", "reply_at"]

Message = Mapping[str, str]
Prompt = str | Sequence[Message]
#: Ceiling of the first pause between tries, in seconds; doubles after every failed try.
BACKOFF_SECONDS = 0.5


def last_user_turn(prompt: Prompt) -> str:
    """The text of the prompt's last user message (the prompt itself when it is a string)."""
    if isinstance(prompt, str):
        return prompt
    for message in reversed(prompt):
        if message.get("role") == "user":
            return message.get("content", "")
    return prompt[-1].get("content", "") if prompt else ""


def as_messages(prompt: Prompt) -> list[dict[str, str]]:
    """The prompt as chat messages (a string becomes one user message)."""
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    return [{"role": m["role"], "content": m["content"]} for m in prompt]


class SystemUnderTest(abc.ABC):
    """Something that answers prompts."""

    #: Short description for reports.
    describe = "system under test"

    @abc.abstractmethod
    async def ask(self, prompt: Prompt) -> str:
        """The reply to `prompt`; raises SUTError when there is none."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook, most adapters hold nothing
        """Release connections (no-op by default)."""


C = TypeVar("C")


class _PerLoop(Generic[C]):
    """One client per event loop: HTTP connections belong to the loop that opened them, and
    `score_rows_sync` runs each call in a new loop, so one SUT object serves every call. A
    closed loop's client is dropped unclosed (its loop can no longer run `aclose`)."""

    def __init__(self, make: Callable[[], C]) -> None:
        self._make = make
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: C | None = None

    def get(self) -> C:
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            self._client, self._loop = self._make(), loop
        return self._client

    def current(self) -> C | None:
        """This loop's client, if it has one (for closing)."""
        return self._client if self._loop is asyncio.get_running_loop() else None


class OpenAIChatSUT(SystemUnderTest):
    """An OpenAI-compatible chat completions endpoint, called with the official `openai` SDK.

    base_url: the API root, e.g. "http://127.0.0.1:8000/v1".
    model: the model name to send.
    api_key: bearer token ("unused" for servers that need none).
    system_prompt: prepended as a system message when given (e.g. the profile's prompt).
    temperature: sampling temperature (the config's sut_temperature).
    """

    def __init__(
        self,
        base_url: str,
        model: str = "default",
        api_key: str = "unused",
        system_prompt: str | None = None,
        temperature: float = 0.2,
    ) -> None:
        from openai import AsyncOpenAI

        # Retries and timeouts are ours (ask_with_retries), so the SDK's own are switched off.
        self._clients = _PerLoop(
            lambda: AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=None)
        )
        self._model = model
        self._system_prompt = system_prompt
        self._temperature = temperature
        self.describe = f"OpenAI-compatible endpoint {base_url} (model {model})"

    async def ask(self, prompt: Prompt) -> str:
        from openai import APIStatusError, APITimeoutError, OpenAIError

        messages: list[Any] = as_messages(prompt)
        if self._system_prompt:
            messages.insert(0, {"role": "system", "content": self._system_prompt})
        try:
            raw = await self._clients.get().chat.completions.with_raw_response.create(
                model=self._model, messages=messages, temperature=self._temperature
            )
            # A body that is not JSON (an HTML error page) is the SUT's fault, like any bad
            # reply: a failed case, not an exception that ends the run.
            document = json_body(raw.http_response, OPENAI_API_ROOT_HINT)
            response = raw.parse()
        except APIStatusError as error:
            hint = None
            if error.status_code in (404, 405):
                hint = (
                    "nothing answers OpenAI chat completions at this URL; for a plain JSON "
                    f"endpoint use {setting('kind', 'http')}, for an OpenAI-compatible one give "
                    "the API root (e.g. http://host/v1)"
                )
            # The SDK's own message is only "Error code: 503"; the body says why.
            body = error.response.text[:200].strip()
            failure = _status_error(error.status_code, body or str(error), error.response.headers)
            failure.hint = hint
            raise failure from None
        except APITimeoutError as error:
            raise SUTError(f"{type(error).__name__}: {error}", "timeout") from None
        except OpenAIError as error:
            raise SUTError(f"{type(error).__name__}: {error}") from None
        choices = getattr(response, "choices", None)
        content: str | None = choices[0].message.content if choices else None
        if content is None:
            completion = isinstance(document, dict) and "choices" in document
            hint = None if completion else http_kind_hint(document)
            raise SUTError("the endpoint returned no message content", "bad_output", hint=hint)
        return content

    async def aclose(self) -> None:
        client = self._clients.current()
        if client is not None:
            await client.close()


def check_body_template(body_template: str) -> None:
    """Raise ValueError unless `body_template` is JSON with a `{prompt}` placeholder."""
    if "{prompt}" not in body_template:
        raise ValueError("body_template must contain the placeholder {prompt}")
    try:
        json.loads(body_template.replace("{prompt}", "probe"))
    except json.JSONDecodeError as error:
        raise ValueError(f"body_template is not JSON once {{prompt}} is filled: {error}") from None


class HttpJsonSUT(SystemUnderTest):
    """Any HTTP endpoint that takes a JSON body and answers JSON.

    url: where to POST.
    body_template: the JSON body with a `{prompt}` placeholder inside a string, e.g.
        '{"message": "{prompt}"}'; the prompt is JSON-escaped before it is put in.
    reply_path: dotted path to the reply text in the response JSON, e.g. "reply" or
        "choices.0.message.content".
    headers: extra request headers (e.g. authorisation).
    """

    def __init__(
        self,
        url: str,
        body_template: str = '{"message": "{prompt}"}',
        reply_path: str = "reply",
        headers: Mapping[str, str] | None = None,
    ) -> None:
        check_body_template(body_template)
        self._url = url
        self._template = body_template
        self._reply_path = reply_path
        fixed = dict(headers or {})
        self._clients = _PerLoop(lambda: httpx.AsyncClient(headers=fixed, timeout=None))
        self.describe = f"HTTP JSON endpoint {url}"

    def body(self, prompt: Prompt) -> bytes:
        """The request body for `prompt` (its last user turn, JSON-escaped into the template)."""
        escaped = json.dumps(last_user_turn(prompt))[1:-1]
        return self._template.replace("{prompt}", escaped).encode("utf-8")

    async def ask(self, prompt: Prompt) -> str:
        try:
            response = await self._clients.get().post(
                self._url, content=self.body(prompt), headers={"content-type": "application/json"}
            )
        except httpx.TimeoutException as error:
            raise SUTError(f"{type(error).__name__}: {error}", "timeout") from None
        except httpx.HTTPError as error:
            raise SUTError(f"{type(error).__name__}: {error}") from None
        if response.status_code >= 400:
            failure = _status_error(response.status_code, response.text[:200], response.headers)
            if response.status_code in (400, 404, 405, 422) and "/v1" in self._url:
                failure.hint = (
                    f"this URL looks like an OpenAI-compatible API: use {setting('kind', 'openai')}"
                    " with the API root as the URL"
                )
            raise failure
        document = json_body(response)
        try:
            return reply_at(document, self._reply_path)
        except SUTError as failure:
            if isinstance(document, dict) and "choices" in document:
                failure.hint = OPENAI_KIND_HINT
            else:
                paths = string_paths(document)
                if paths:
                    where = ", ".join(paths)
                    failure.hint = (
                        f"the reply has text at: {where}; set {setting('reply_path', paths[0])}"
                    )
            raise

    async def aclose(self) -> None:
        client = self._clients.current()
        if client is not None:
            await client.aclose()


class _Response(Protocol):
    """An HTTP response as httpx makes it (the openai SDK's vendored copy too)."""

    @property
    def content(self) -> bytes: ...

    def json(self) -> Any: ...


def json_body(response: _Response, hint: str | None = None) -> Any:
    """The parsed JSON body of a SUT's response; SUTError ("bad_output", with `hint`) when
    the body is not JSON."""
    try:
        return response.json()
    except ValueError:  # JSONDecodeError, or bytes that are not text at all
        text = response.content[:200].decode("utf-8", "replace")
        raise SUTError(f"response is not JSON: {text!r}", "bad_output", hint=hint) from None


def _status_error(status: int, detail: str, headers: Mapping[str, str]) -> SUTError:
    kind = "rate_limited" if status == 429 else "transport"
    return SUTError(f"HTTP {status}: {detail}", kind, retry_after_seconds(headers))


class CallableSUT(SystemUnderTest):
    """A Python function (sync or async) from prompt to reply; its exceptions are failures.

    function: called with the prompt (a string or the message list); a sync function runs in
        a daemon thread of its own, so a call that never returns is abandoned at the timeout
        instead of holding up the run's end (`score_rows_sync` waited for it).
    """

    def __init__(self, function: Callable[[Prompt], str | Awaitable[str]]) -> None:
        self._function = function
        self.describe = f"Python callable {getattr(function, '__name__', repr(function))}"

    async def ask(self, prompt: Prompt) -> str:
        try:
            if inspect.iscoroutinefunction(self._function):
                reply = await self._function(prompt)
            else:
                reply = await in_daemon_thread(self._function, prompt)
                if inspect.isawaitable(reply):
                    reply = await reply
        except Exception as error:
            raise SUTError(f"{type(error).__name__}: {error}") from None
        if not isinstance(reply, str):
            raise SUTError(
                f"the callable returned {type(reply).__name__}, not a string", "bad_output"
            )
        return reply


class RecordedSUT(SystemUnderTest):
    """Replies recorded earlier, looked up by the prompt's last user turn.

    replies: prompt text -> recorded reply.
    """

    describe = "recorded replies"

    def __init__(self, replies: Mapping[str, str]) -> None:
        self._replies = dict(replies)

    async def ask(self, prompt: Prompt) -> str:
        key = last_user_turn(prompt)
        if key not in self._replies:
            raise SUTError(f"no recorded reply for {key[:80]!r}")
        return self._replies[key]


@dataclass(frozen=True)
class SUTReply:
    """The outcome of asking the SUT once (with retries).

    text: the reply, or None when every try failed.
    error: the last failure's message when text is None.
    attempts: how many tries were made.
    kind: the last failure's kind (see SUTError) when text is None.
    hint: the last failure's hint (see SUTError), if it had one.
    """

    text: str | None
    error: str | None
    attempts: int
    kind: str | None = None
    hint: str | None = None

    @property
    def failed(self) -> bool:
        return self.text is None


#: Control characters a reply loses (tabs and line breaks stay).
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


async def ask_with_retries(
    sut: SystemUnderTest,
    prompt: Prompt,
    *,
    retries: int,
    timeout: float,
    limit: asyncio.Semaphore,
    backoff: float = BACKOFF_SECONDS,
) -> SUTReply:
    """Ask `sut`, retrying failures; never raises for SUT or transport problems. A blank
    reply (empty or whitespace) is a failure of kind "bad_output", like a missing one.

    sut: the system under test.
    prompt: what to ask.
    retries: extra tries after a failure (n_sut_retries).
    timeout: seconds allowed per try (timeout_seconds).
    limit: shared semaphore bounding calls in flight (concurrency_limit); held per try only,
        so a pause between tries leaves room for other calls.
    backoff: ceiling of the first pause between tries, doubled after each further failure.
    """
    attempts = 0

    async def attempt() -> str:
        nonlocal attempts
        attempts += 1
        async with limit:
            try:
                text = await asyncio.wait_for(sut.ask(prompt), timeout)
            except TimeoutError:
                raise SUTError(f"timed out after {timeout:g}s", "timeout") from None
        # A reply is untrusted text: a lone surrogate (which no encoder or UTF-8 file takes)
        # becomes U+FFFD, and control characters other than tabs and line breaks (NUL, ANSI
        # escapes that would drive the user's terminal) are dropped.
        text = _CONTROL.sub("", valid_text(text))
        # A reply with no text says nothing the judge could credit: it is a bad reply, as a
        # missing one (`content: null`) is, whatever the adapter.
        if not text.strip():
            raise SUTError(f"the reply is blank ({text[:20]!r}): no text", "bad_output")
        return text

    def classify(error: Exception) -> Retryable | None:
        if isinstance(error, SUTError):
            return Retryable(error.kind, error.retry_after)
        return None

    policy = RetryPolicy(attempts=retries + 1, base_delay=backoff)
    try:
        text = await retry(attempt, policy, classify, what="SUT call")
    except GaveUp as gave_up:
        if not isinstance(gave_up.error, SUTError):
            raise gave_up.error from None
        error = gave_up.error
        return SUTReply(None, str(error), attempts, error.kind, error.hint)
    return SUTReply(text, None, attempts)
