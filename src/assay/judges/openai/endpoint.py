"""The one OpenAI-compatible call layer: what the LLM judge, the OOD judge and the OOD probe
generator all call an LLM through.

An `LLMEndpoint` wraps one endpoint and model (`LLMSettings`) and adds to each call
(`calls.call_with_retries`: retries, timeouts, error kinds):

- capabilities learned once, from a known-good probe request (`probe.py`), before the first
  call: the structured-output form ("auto" tries OpenAI's `json_schema`, then
  llama-cpp-python's `json_object` with a schema, then plain text), whether answers list
  `top_logprobs`, and the model the server reports. A refused user row never changes them: it
  is that row's error (`input_too_long`, `content_filtered`, `transport`);
- a concurrency limit (`settings.concurrency` calls in flight per event loop);
- the call cache (`judges/cache.py`): a repeated call is answered from disk. The key covers the
  endpoint's identity (base URL, model asked for, model reported), the response format, the
  whole request (messages, sampling settings) and the caller's tag (e.g. its prompt version);
  only answers the caller found readable are stored;
- usage accounting (`judges/usage.py`): calls, probe calls, tokens and cache hits, per row.

Callers that make several calls can hold `connected()` open around them so they share one HTTP
connection pool.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
import weakref
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from functools import cache
from typing import Any, TypeVar

import openai

from assay.judges.cache import CallCache, cache_key
from assay.judges.openai.calls import (
    BAD_OUTPUT,
    CONTENT_FILTERED,
    RATE_LIMITED,
    TIMEOUT,
    TRANSPORT,
    Completion,
    NotAllowed,
    RequestRejected,
    Unreachable,
    call_with_retries,
)
from assay.judges.openai.probe import (
    PROBE_SCHEMA,
    Capabilities,
    base_url,
    identity,
    probe_request,
    read_capabilities,
    record_key,
)
from assay.judges.openai.settings import LLMSettings
from assay.judges.usage import WHOLE_ROW, RowKey, Usage, record_row_usage
from assay.schema import JudgeFailure

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: Structured-output forms tried, in order, when the setting is "auto".
AUTO_MODES = ("json_schema", "json_object", "none")
#: A reply wrapped in a Markdown code fence (small models do this even when asked not to).
_FENCE = re.compile(r"^```(?:json)?\s*|\s*```$", re.MULTILINE)


#: A 404 that is about the model, not the path (OpenAI, vLLM, Ollama word it so).
_MODEL_NOT_FOUND = re.compile(
    r"model_not_found|model\b.{0,200}\b(?:not found|does not exist|not exist)", re.IGNORECASE
)
#: How long a probe that could not reach the endpoint stands for every call: a dead endpoint
#: fails a run's rows at once instead of each row waiting through the probe's retries again.
REPROBE_AFTER_SECONDS = 30.0
#: Probe failures (after the probe's retries) that stand for REPROBE_AFTER_SECONDS.
STANDING_FAILURES = frozenset({TIMEOUT, TRANSPORT, RATE_LIMITED})


def response_format(mode: str, schema: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The `response_format` for structured-output `mode`, or None to send none."""
    if schema is None or mode == "none":
        return None
    if mode == "json_object":
        # llama-cpp-python's spelling: it compiles the schema into a grammar.
        return {"type": "json_object", "schema": dict(schema)}
    return {
        "type": "json_schema",
        "json_schema": {"name": "answer", "schema": dict(schema), "strict": True},
    }


def call_key(
    settings: LLMSettings,
    capabilities: Capabilities,
    request: Mapping[str, Any],
    schema: Mapping[str, Any] | None,
    tag: Mapping[str, Any],
) -> str:
    """The cache key of one call: who answers (base URL, model asked for, model reported), the
    response format it is sent with, the whole request and the caller's `tag`."""
    form = capabilities.form if schema is not None else "none"
    return cache_key(
        {
            "endpoint": identity(settings, capabilities),
            "response_format": response_format(form, schema),
            "request": dict(request),
            "tag": dict(tag),
        }
    )


def recalled_capabilities(settings: LLMSettings, cache: CallCache | None) -> Capabilities | None:
    """What the last probe of this endpoint found, as kept in the cache file; None if unknown.
    Only for estimates that may make no call (`--dry-run`)."""
    stored = cache.get(record_key(settings)) if cache is not None else None
    try:
        return Capabilities.from_json(stored) if stored is not None else None
    except (KeyError, TypeError, ValueError):
        return None


class LLMEndpoint:
    """One OpenAI-compatible endpoint and model, called the same way by every LLM user.

    settings: endpoint, model, timeouts, attempts, concurrency, cache settings.
    cache: the call cache; default the file `settings.cache_file()` when `settings.cache`.
    """

    def __init__(self, settings: LLMSettings, cache: CallCache | None = None) -> None:
        self.settings = settings
        if cache is None and settings.cache:
            cache = CallCache(settings.cache_file(), settings.cache_ttl)
        self.cache = cache
        # Learned by the probe before the first call, then kept for every later call.
        self.found: Capabilities | None = None
        # Set when the endpoint refused every form of the probe, refused the API key (401/403)
        # or answered it with no chat completion: it cannot serve any row.
        self._refused: JudgeFailure | None = None
        # (until when, why): a probe that could not connect at all, or got no answer in time,
        # even with its retries; calls until then fail at once instead of each probing a dead
        # endpoint again. (An endpoint that answers with errors, a 503 while it loads, is
        # probed again by the next call.)
        self._unreachable: tuple[float, JudgeFailure] | None = None
        # Semaphores, locks and HTTP clients belong to one event loop; sync callers may use
        # several.
        self._limiters: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary()
        )
        self._probing: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )
        self._clients: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, tuple[openai.AsyncOpenAI, list[int]]
        ] = weakref.WeakKeyDictionary()

    @asynccontextmanager
    async def connected(self) -> AsyncIterator[openai.AsyncOpenAI]:
        """The HTTP client of the running loop, shared by every caller inside this block and
        closed when the last of them leaves."""
        loop = asyncio.get_running_loop()
        entry = self._clients.get(loop)
        if entry is None:
            # The SDK's own retries are off: ours honour retry-after and the row's time budget.
            client = openai.AsyncOpenAI(
                base_url=self.settings.base_url,
                api_key=self.settings.api_key,
                max_retries=0,
                timeout=self.settings.call_timeout,
            )
            entry = (client, [0])
            self._clients[loop] = entry
        client, users = entry
        users[0] += 1
        try:
            yield client
        finally:
            users[0] -= 1
            if users[0] == 0:
                del self._clients[loop]
                await client.close()

    async def capabilities(
        self, *, row: RowKey = WHOLE_ROW, deadline: float | None = None
    ) -> Capabilities:
        """What the endpoint can do; the first caller probes it (once per endpoint), callers
        that come meanwhile wait for that answer.

        row: the row whose call needed the probe; the probe's calls are counted on it as
            `probe_calls`.
        deadline: `time.monotonic()` value after which no probe attempt starts.

        Raises JudgeFailure when the probe could not be made: nothing is learned then, and the
        next call probes again; but when no connection could be made at all or the probe got no
        answer in time, calls in the next `REPROBE_AFTER_SECONDS` get that failure at once, and
        a refused key or an answer that is no chat completion fails every later call.
        """
        if self.found is not None:
            return self.found
        self._raise_if_known_down()
        if deadline is None:
            deadline = time.monotonic() + self.settings.row_timeout
        lock = self._probing.setdefault(asyncio.get_running_loop(), asyncio.Lock())
        async with lock:
            if self.found is None:
                self._raise_if_known_down()
                try:
                    async with self.connected() as client:
                        self.found = await self._probe(client, row, deadline)
                except NotAllowed as failure:  # a wrong key stays wrong: no row calls again
                    self._refused = failure
                    raise
                except JudgeFailure as failure:
                    # Nothing to connect to, nothing that answers in time, or only errors and
                    # refusals through every retry: the rows queued behind this probe fail at
                    # once instead of each making its own (a dead endpoint cost a 10,000-row
                    # run 80,000 calls and hours of backoff).
                    if isinstance(failure, Unreachable) or failure.kind in STANDING_FAILURES:
                        self._unreachable = (time.monotonic() + REPROBE_AFTER_SECONDS, failure)
                    if failure.kind == BAD_OUTPUT:  # a 200 that is no chat completion
                        self._refused = JudgeFailure(
                            TRANSPORT,
                            f"the LLM endpoint {base_url(self.settings)} answered the capability "
                            f"probe with no chat completion ({failure.message}): is base_url "
                            "(ASSAY_LLM_BASE_URL or --llm base_url=...) an OpenAI-compatible "
                            "API root, e.g. http://127.0.0.1:8080/v1?",
                        )
                        raise self._refused from None
                    raise
                if self.cache is not None:
                    self.cache.put(record_key(self.settings), self.found.to_json())
            return self.found

    async def complete(
        self,
        request: dict[str, Any],
        *,
        schema: dict[str, Any] | None = None,
        deadline: float | None = None,
        row: RowKey = WHOLE_ROW,
        cache_tag: Mapping[str, Any] | None = None,
        cacheable: Callable[[Completion], bool] | None = None,
    ) -> Completion:
        """One chat completion.

        request: keyword arguments of `chat.completions.create`, without `response_format`.
        schema: JSON schema of the answer, asked for in the endpoint's structured-output form;
            None for free text.
        deadline: `time.monotonic()` value after which no attempt starts; default
            `settings.row_timeout` from now.
        row: the row the call's usage is recorded on (see `judges/usage.py`).
        cache_tag: what else decides the answer besides the request (e.g. the prompt version);
            with `cacheable`, the call is read from and written to the cache.
        cacheable: whether an answer is worth keeping (readable); others are never stored.

        Raises JudgeFailure: "timeout", "rate_limited", "transport", "bad_output";
        "input_too_long" or "content_filtered" when the endpoint refused this request or
        filtered its answer.
        """
        if deadline is None:
            deadline = time.monotonic() + self.settings.row_timeout
        found = await self.capabilities(row=row, deadline=deadline)
        key = None
        if self.cache is not None and cache_tag is not None and cacheable is not None:
            key = call_key(self.settings, found, request, schema, cache_tag)
            stored = self.cache.get(key)
            if stored is not None:
                record_row_usage(row, Usage(cached_calls=1))
                return Completion.from_json(stored)
        full = dict(request)
        structured = response_format(found.form, schema)
        if structured is not None:
            full["response_format"] = structured
        async with self.connected() as client:
            completion = await self._call(client, full, deadline, row, probe=False)
        if completion.finish_reason == "content_filter":
            raise JudgeFailure(CONTENT_FILTERED, "the provider's content filter cut the answer")
        # Only answers the caller could read are kept: a cached reply must be a real one.
        if key is not None and self.cache is not None and cacheable and cacheable(completion):
            self.cache.put(key, completion.to_json())
        return completion

    async def complete_json(
        self,
        system: str,
        user: str,
        *,
        schema: dict[str, Any],
        temperature: float,
        read: Callable[[Any], T],
        row: RowKey = WHOLE_ROW,
    ) -> T:
        """Ask with a system and a user message and read the reply as JSON.

        schema: the answer's JSON schema, asked for as structured output (small local models
            answer in JSON too).
        temperature: sampling temperature.
        read: turns the parsed JSON into the answer, raising JudgeFailure "bad_output" when it
            lacks what the schema asks for; replies it refuses are not cached.
        row: the row the call's usage is recorded on.

        Raises JudgeFailure: "bad_output" when the reply is not JSON, else as `complete`.
        """
        request: dict[str, Any] = {
            "model": self.settings.model,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
            "temperature": temperature,
            "max_tokens": self.settings.max_tokens,
        }

        def readable(completion: Completion) -> bool:
            try:
                read(read_json(completion))
            except JudgeFailure:
                return False
            return True

        completion = await self.complete(
            request,
            schema=schema,
            row=row,
            cache_tag={"purpose": "json"},
            cacheable=readable,
        )
        return read(read_json(completion))

    async def _probe(
        self, client: openai.AsyncOpenAI, row: RowKey, deadline: float
    ) -> Capabilities:
        """Ask the probe in each form until one is accepted: with logprobs first, then (only if
        every form was refused) without."""
        forms = AUTO_MODES if self.settings.structured == "auto" else (self.settings.structured,)
        refusals: list[str] = []
        statuses: set[int] = set()
        last = ""
        missing_model = False  # no other form serves a model the endpoint does not have
        for logprobs in (True, False):
            for form in forms:
                request = probe_request(self.settings, logprobs)
                structured = response_format(form, PROBE_SCHEMA)
                if structured is not None:
                    request["response_format"] = structured
                try:
                    completion = await self._call(client, request, deadline, row, probe=True)
                except RequestRejected as rejected:
                    logger.info(
                        "LLM endpoint %s refused the probe (response_format %s, logprobs %s): %s",
                        base_url(self.settings),
                        form,
                        "on" if logprobs else "off",
                        rejected.message,
                    )
                    refusals.append(f"{form}{'' if logprobs else ' without logprobs'}")
                    statuses.add(rejected.status)
                    last = rejected.message
                    missing_model = rejected.status == 404 and bool(_MODEL_NOT_FOUND.search(last))
                    if missing_model:
                        break
                    continue
                found = read_capabilities(completion, form, logprobs)
                self._log(found)
                return found
            if missing_model:
                break
        where = base_url(self.settings)
        if missing_model:
            message = (
                f"the LLM endpoint {where} does not serve the model {self.settings.model!r} "
                f"({last}): set ASSAY_LLM_MODEL (or --llm model=...) to a model it "
                "serves (GET /models lists them)"
            )
        elif statuses == {404}:  # no form was refused: nothing answers at this path
            message = (
                f"the LLM endpoint {where} has no chat completions route (HTTP 404 for every "
                f"request; {last}): base_url (ASSAY_LLM_BASE_URL or --llm base_url=...) must be "
                "the API root that /chat/completions follows, e.g. http://127.0.0.1:8080/v1"
            )
        else:
            message = (
                f"the LLM endpoint {where} refused every form of the capability probe "
                f"({', '.join(refusals)}); last: {last}"
            )
        # Raised, not also logged: every row's error carries it, and a CLI says it once.
        self._refused = JudgeFailure(TRANSPORT, message)
        raise self._refused

    def _raise_if_known_down(self) -> None:
        if self._refused is not None:
            raise self._refused
        if self._unreachable is not None and time.monotonic() < self._unreachable[0]:
            failure = self._unreachable[1]  # a fresh exception: each raise has its own traceback
            raise Unreachable(
                failure.kind,
                f"not sent: the endpoint failed its capability probe ({failure.message}); it is "
                f"probed again {REPROBE_AFTER_SECONDS:g} s after that",
            )

    def _log(self, found: Capabilities) -> None:
        where = base_url(self.settings)
        model = found.reported_model or "not reported"
        logger.info(
            "LLM endpoint %s (model %s, server reports %s): structured output %s, logprobs %s",
            where,
            self.settings.model,
            model,
            found.form,
            "listed" if found.logprobs else "not listed",
        )
        if not found.logprobs:
            logger.warning(
                "LLM endpoint %s lists no top_logprobs; the judge answers by %d sampled votes "
                "per call instead",
                where,
                self.settings.votes,
            )

    async def _call(
        self,
        client: openai.AsyncOpenAI,
        request: dict[str, Any],
        deadline: float,
        row: RowKey,
        *,
        probe: bool,
    ) -> Completion:
        """One call with retries; its attempts and tokens are recorded on `row`."""
        attempt = Usage(probe_calls=1) if probe else Usage(calls=1)
        completion = await call_with_retries(
            client,
            request,
            self.settings,
            self._limiter(),
            deadline,
            on_attempt=lambda: record_row_usage(row, attempt),
        )
        record_row_usage(
            row,
            Usage(
                prompt_tokens=completion.prompt_tokens,
                completion_tokens=completion.completion_tokens,
            ),
        )
        return completion

    def _limiter(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        limiter = self._limiters.get(loop)
        if limiter is None:
            limiter = self._limiters[loop] = asyncio.Semaphore(self.settings.concurrency)
        return limiter


@cache
def shared_endpoint(settings: LLMSettings) -> LLMEndpoint:
    """This process's endpoint for `settings`: its probe runs and its call cache opens once, not
    once per batch of rows (the endpoint keeps its clients and locks per event loop)."""
    return LLMEndpoint(settings)


def read_json(completion: Completion) -> Any:
    """The reply as JSON (a Markdown code fence around it is dropped); JudgeFailure
    "bad_output" when it is not JSON."""
    content = completion.content.strip()
    try:
        return json.loads(_FENCE.sub("", content))
    except json.JSONDecodeError:
        raise JudgeFailure(BAD_OUTPUT, f"LLM reply is not JSON: {content[:200]!r}") from None
