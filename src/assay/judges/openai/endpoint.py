"""The one OpenAI-compatible call layer: what the LLM judge, the OOD judge and the OOD probe
generator all call an LLM through.

An `LLMEndpoint` wraps one endpoint and model (`LLMSettings`) and adds to each call
(`calls.call_with_retries`: retries, timeouts, error kinds):

- structured output negotiated once and remembered: "auto" tries OpenAI's `json_schema`, then
  llama-cpp-python's `json_object` with a schema, then plain text, and keeps the first form the
  endpoint accepts, so later calls go straight to it (calls that start meanwhile wait for the
  answer rather than each be refused in turn);
- a concurrency limit (`settings.concurrency` calls in flight per event loop);
- the call cache (`judges/cache.py`): a repeated call is answered from disk;
- usage accounting (`judges/usage.py`): calls, tokens and cache hits, per row.

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
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import openai

from assay.judges.cache import CallCache, cache_key
from assay.judges.openai.calls import (
    BAD_OUTPUT,
    TRANSPORT,
    Completion,
    RequestRejected,
    call_with_retries,
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


def response_format(mode: str, schema: dict[str, Any] | None) -> dict[str, Any] | None:
    """The `response_format` for structured-output `mode`, or None to send none."""
    if schema is None or mode == "none":
        return None
    if mode == "json_object":
        # llama-cpp-python's spelling: it compiles the schema into a grammar.
        return {"type": "json_object", "schema": schema}
    return {
        "type": "json_schema",
        "json_schema": {"name": "answer", "schema": schema, "strict": True},
    }


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
        # Learned from the endpoint on first use, then reused for every later call.
        self.structured: str | None = None if settings.structured == "auto" else settings.structured
        # Semaphores, locks and HTTP clients belong to one event loop; sync callers may use
        # several.
        self._limiters: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary()
        )
        self._negotiating: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
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

    async def complete(
        self,
        request: dict[str, Any],
        *,
        schema: dict[str, Any] | None = None,
        deadline: float | None = None,
        row: RowKey = WHOLE_ROW,
        cache_as: str | None = None,
        check: Callable[[Completion], object] | None = None,
    ) -> Completion:
        """One chat completion.

        request: keyword arguments of `chat.completions.create`, without `response_format`.
        schema: JSON schema of the answer, asked for as structured output (negotiated); None
            for free text.
        deadline: `time.monotonic()` value after which no attempt starts; default
            `settings.row_timeout` from now.
        row: the row the call's usage is recorded on (see `judges/usage.py`).
        cache_as: the call's cache key; None to neither read nor write the cache.
        check: raises JudgeFailure for an answer not worth keeping; such answers are not cached.

        Raises JudgeFailure (kinds "timeout", "rate_limited", "transport", "bad_output").
        """
        if self.cache is not None and cache_as is not None:
            stored = self.cache.get(cache_as)
            if stored is not None:
                record_row_usage(row, Usage(cached_calls=1))
                return Completion.from_json(stored)
        if deadline is None:
            deadline = time.monotonic() + self.settings.row_timeout
        async with self.connected() as client:
            completion = await self._negotiated(client, request, schema, deadline, row)
        if check is not None:
            check(completion)
        if self.cache is not None and cache_as is not None:
            self.cache.put(cache_as, completion.to_json())
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
        key = cache_key({"purpose": "json", "schema": schema, **request})
        completion = await self.complete(
            request, schema=schema, row=row, cache_as=key, check=lambda c: read(read_json(c))
        )
        return read(read_json(completion))

    async def _negotiated(
        self,
        client: openai.AsyncOpenAI,
        request: dict[str, Any],
        schema: dict[str, Any] | None,
        deadline: float,
        row: RowKey,
    ) -> Completion:
        if schema is None:
            return await self._in_forms(client, request, None, ["none"], deadline, row)
        if self.structured is None:
            loop = asyncio.get_running_loop()
            lock = self._negotiating.setdefault(loop, asyncio.Lock())
            async with lock:
                if self.structured is None:
                    forms = list(AUTO_MODES)
                    return await self._in_forms(client, request, schema, forms, deadline, row)
        return await self._in_forms(client, request, schema, [self.structured], deadline, row)

    async def _in_forms(
        self,
        client: openai.AsyncOpenAI,
        request: dict[str, Any],
        schema: dict[str, Any] | None,
        forms: list[str],
        deadline: float,
        row: RowKey,
    ) -> Completion:
        """The call in the first of `forms` the endpoint accepts (remembered when a schema is
        asked for)."""
        for position, form in enumerate(forms):
            full = dict(request)
            structured = response_format(form, schema)
            if structured is not None:
                full["response_format"] = structured
            try:
                completion = await call_with_retries(
                    client,
                    full,
                    self.settings,
                    self._limiter(),
                    deadline,
                    on_attempt=lambda: record_row_usage(row, Usage(calls=1)),
                )
            except RequestRejected as rejected:
                if position + 1 < len(forms):
                    logger.info("endpoint refused response_format %s: %s", form, rejected.message)
                    continue
                rejected.form = form
                raise
            if schema is not None:
                self.structured = form
            record_row_usage(
                row,
                Usage(
                    prompt_tokens=completion.prompt_tokens,
                    completion_tokens=completion.completion_tokens,
                ),
            )
            return completion
        raise JudgeFailure(TRANSPORT, "the endpoint refused every request form")

    def _limiter(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        limiter = self._limiters.get(loop)
        if limiter is None:
            limiter = self._limiters[loop] = asyncio.Semaphore(self.settings.concurrency)
        return limiter


def read_json(completion: Completion) -> Any:
    """The reply as JSON (a Markdown code fence around it is dropped); JudgeFailure
    "bad_output" when it is not JSON."""
    content = completion.content.strip()
    try:
        return json.loads(_FENCE.sub("", content))
    except json.JSONDecodeError:
        raise JudgeFailure(BAD_OUTPUT, f"LLM reply is not JSON: {content[:200]!r}") from None
