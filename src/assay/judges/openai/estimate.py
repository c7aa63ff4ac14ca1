"""What a run will cost the LLM endpoint, computed before any call is made (`--dry-run`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from assay.judges.base import Question
from assay.judges.cache import CallCache
from assay.judges.openai.endpoint import call_key, recalled_capabilities
from assay.judges.openai.judge import request_tag, rubric_requests
from assay.judges.openai.settings import LLMSettings

#: Rough characters per token of English text under common BPE tokenizers.
CHARS_PER_TOKEN = 4.0
#: Chat-template tokens per message (role markers and separators).
TOKENS_PER_MESSAGE = 4
#: Completion tokens of one labelled answer in a "fields" reply (`"3": "yes", `).
TOKENS_PER_FIELD = 6
#: Extra completion tokens per instruction when a quote is asked for.
TOKENS_PER_QUOTE = 24


@dataclass
class CostEstimate:
    """calls: calls to make (cache hits excluded); cached_calls: calls the cache will answer;
    prompt_tokens / completion_tokens: estimated tokens of the calls to make;
    questions: instructions sent to the LLM; logprobs: whether the last probe of the endpoint
    found it returns logprobs (None: no probe on record, counted as if it does)."""

    questions: int = 0
    calls: int = 0
    cached_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    logprobs: bool | None = None


def estimate_tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def estimate_cost(
    settings: LLMSettings, questions: Sequence[Question], cache: CallCache | None
) -> CostEstimate:
    """The calls and tokens `OpenAIJudge(settings)` would spend on `questions` if every reply
    is readable.

    A dry run makes no call, so it reads what the last probe of this endpoint found, kept in
    the cache file: whether it lists logprobs (if not, each call becomes `settings.votes`
    sampled calls) and who answers (the cache key holds the model the server reports and the
    response format its probe accepted), also with the cache off. When no probe is on record,
    it assumes logprobs and counts every call as one to make.
    """
    estimate = CostEstimate(questions=len(questions))
    per_field = TOKENS_PER_FIELD + (TOKENS_PER_QUOTE if any(q.explain for q in questions) else 0)
    # With the cache off (--no-cache) no call is answered from it, but the probe's record in
    # its file still says what the endpoint does (read only: the file is never created here).
    record = cache
    if record is None and settings.cache_file().is_file():
        record = CallCache(settings.cache_file(), settings.cache_ttl)
    found = recalled_capabilities(settings, record)
    estimate.logprobs = found.logprobs if found is not None else None
    votes: list[int | None] = [None]
    if found is not None and not found.logprobs:
        votes = list(range(settings.votes))
    planned_calls = [
        (vote, planned) for vote in votes for planned in rubric_requests(settings, questions, vote)
    ]
    for vote, planned in planned_calls:
        if cache is not None and found is not None:
            key = call_key(settings, found, planned.request, planned.schema, request_tag(vote))
            if cache.get(key) is not None:
                estimate.cached_calls += 1
                continue
        estimate.calls += 1
        estimate.prompt_tokens += sum(
            estimate_tokens(m["content"]) + TOKENS_PER_MESSAGE for m in planned.request["messages"]
        )
        if settings.strategy == "fields":
            estimate.completion_tokens += 2 + planned.questions * per_field
        else:
            estimate.completion_tokens += int(planned.request["max_tokens"])
    return estimate
