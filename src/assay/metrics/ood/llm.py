"""The one place the OOD metric talks to an LLM: an OpenAI-compatible chat endpoint via `openai`.

Thin: settings from the environment and one JSON-returning call. Its answers are asked for as
structured output with the LLM judge's negotiation (`judges/openai`: OpenAI's json_schema, then
llama-cpp-python's json_object with a schema, then plain text), so small local models answer in
JSON too; its probabilities are the model's stated ones, not logprobs, because an OOD verdict
combines two judgements (in scope, refused) rather than one yes/no.
Environment: ASSAY_LLM_BASE_URL, ASSAY_LLM_MODEL, ASSAY_LLM_API_KEY (optional for local servers).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from assay.schema import JudgeFailure

_FENCE = re.compile(r"^```(?:json)?\s*|\s*```$", re.MULTILINE)


@dataclass(frozen=True)
class LLMSettings:
    """Where the LLM lives.

    base_url: the OpenAI-compatible API root, e.g. "http://127.0.0.1:8080/v1".
    model: the model name to request.
    api_key: the key sent as a bearer token ("unused" for servers that need none).
    """

    base_url: str
    model: str
    api_key: str = "unused"


def llm_settings_from_env(environ: Mapping[str, str] | None = None) -> LLMSettings | None:
    """LLM settings from ASSAY_LLM_* variables, or None when no LLM is configured.

    environ: the variables to read (os.environ by default).
    """
    env = os.environ if environ is None else environ
    base_url = env.get("ASSAY_LLM_BASE_URL", "").strip()
    model = env.get("ASSAY_LLM_MODEL", "").strip()
    if not base_url or not model:
        return None
    return LLMSettings(base_url, model, env.get("ASSAY_LLM_API_KEY", "").strip() or "unused")


async def complete_json(
    settings: LLMSettings,
    system: str,
    user: str,
    temperature: float,
    timeout: float,
    schema: dict[str, Any] | None = None,
) -> Any:
    """Ask the LLM and parse its reply as JSON.

    settings: the endpoint and model.
    system, user: the two chat messages.
    temperature: sampling temperature.
    timeout: seconds for the whole call.
    schema: JSON schema of the answer. Sent as structured output in the first form the endpoint
        accepts (OpenAI's json_schema, llama-cpp-python's json_object with a schema, then none),
        the same negotiation as the LLM judge's, so small local models answer in JSON too.

    Raises JudgeFailure("transport", ...) when the call fails and JudgeFailure("unparseable", ...)
    when the reply is not JSON.
    """
    from openai import APIStatusError, AsyncOpenAI, BadRequestError, OpenAIError

    from assay.judges.openai.calls import refused_request
    from assay.judges.openai.judge import AUTO_MODES
    from assay.judges.openai.prompts import response_format

    client = AsyncOpenAI(
        base_url=settings.base_url, api_key=settings.api_key, max_retries=1, timeout=timeout
    )
    modes = list(AUTO_MODES) if schema is not None else ["none"]
    try:
        for mode in modes:
            structured = response_format(mode, schema)
            extra: dict[str, Any] = {"response_format": structured} if structured else {}
            try:
                response = await client.chat.completions.create(
                    model=settings.model,
                    messages=[
                        {"role": "system", "content": system},
                        {"role": "user", "content": user},
                    ],
                    temperature=temperature,
                    **extra,
                )
                break
            except (BadRequestError, APIStatusError) as error:
                # An endpoint that cannot do this form of structured output: try the next.
                if mode == modes[-1] or not (
                    isinstance(error, BadRequestError) or refused_request(error)
                ):
                    raise
    except OpenAIError as error:
        raise JudgeFailure("transport", f"LLM call failed: {error}") from None
    finally:
        await client.close()
    content = (response.choices[0].message.content or "") if response.choices else ""
    try:
        return json.loads(_FENCE.sub("", content.strip()))
    except json.JSONDecodeError:
        raise JudgeFailure("unparseable", f"LLM reply is not JSON: {content[:200]!r}") from None
