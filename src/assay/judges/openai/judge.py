"""OpenAIJudge: answers instructions with an LLM behind any OpenAI-compatible endpoint.

Questions are grouped per row and detector ("a rubric"). With the "fields" strategy a rubric is
one call whose JSON reply has one answer per instruction; with "per_instruction" each
instruction is a 1-token call over a shared prompt prefix. Either way each instruction's
`follow_probability` is P(yes) read from the answer token's logprobs. An endpoint that returns no
logprobs is asked k times at temperature > 0 and the share of yes votes is used instead; such
verdicts say so. A reply that cannot be read is re-asked once; after that, the instructions
still unanswered are explicit failures. Calls go through the shared LLM layer
(`endpoint.LLMEndpoint`: structured-output negotiation, retries, concurrency, cache, usage).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Any

from assay.judges.base import Judge, Question, Verdict
from assay.judges.cache import CallCache, cache_key
from assay.judges.openai.calls import Completion, RequestRejected
from assay.judges.openai.endpoint import LLMEndpoint
from assay.judges.openai.parsing import Reading, read_fields, read_single
from assay.judges.openai.prompts import (
    PROMPT_VERSION,
    REASK,
    Messages,
    fields_messages,
    fields_schema,
    instruction_messages,
)
from assay.judges.openai.settings import LLMSettings, settings_from_env
from assay.judges.openai.verdicts import verdict_from_reading, verdict_from_votes
from assay.judges.usage import row_key
from assay.schema import JudgeFailure

logger = logging.getLogger(__name__)

Answer = Verdict | JudgeFailure
GroupKey = tuple[str, str, str | None, tuple[str, ...], bool]
#: Completion budget of a per-instruction call that also quotes evidence.
EXPLAIN_TOKENS = 64


class OpenAIJudge(Judge):
    """The LLM judge.

    settings: endpoint, strategy, timeouts...; default: from the environment (`settings_from_env`).
    cache: the judge-call cache; default: the file `settings.cache_file()` when `settings.cache`.
    """

    name = "openai"

    def __init__(self, settings: LLMSettings | None = None, cache: CallCache | None = None) -> None:
        self.settings = settings or settings_from_env()
        self.endpoint = LLMEndpoint(self.settings, cache)
        self.cache = self.endpoint.cache
        # Learned from the endpoint on first use, then reused for every later call.
        self._has_logprobs: bool | None = None

    # -- the Judge interface ---------------------------------------------------------------

    async def answer(self, questions: Sequence[Question]) -> list[Answer]:
        groups: dict[GroupKey, list[int]] = {}
        for index, question in enumerate(questions):
            groups.setdefault(_group_key(question), []).append(index)
        results: list[Answer | None] = [None] * len(questions)
        # Rubrics start as slots free up, so a row's time budget is not spent waiting in line.
        slots = asyncio.Semaphore(self.settings.concurrency)
        async with self.endpoint.connected():
            outcomes = await asyncio.gather(
                *(self._answer_rubric([questions[i] for i in ix], slots) for ix in groups.values())
            )
        for indexes, answers in zip(groups.values(), outcomes, strict=True):
            for index, answer in zip(indexes, answers, strict=True):
                results[index] = answer
        return [r if r is not None else JudgeFailure("judge_error", "no answer") for r in results]

    # -- one rubric (one row and detector) ---------------------------------------------------

    async def _answer_rubric(
        self, questions: list[Question], slots: asyncio.Semaphore
    ) -> list[Answer]:
        async with slots:
            return await self._answer_rubric_now(questions)

    async def _answer_rubric_now(self, questions: list[Question]) -> list[Answer]:
        deadline = time.monotonic() + self.settings.row_timeout
        try:
            async with asyncio.timeout(self.settings.row_timeout):
                if self.settings.strategy == "fields":
                    return await self._ask_fields(questions, deadline)
                return list(
                    await asyncio.gather(*(self._ask_single(q, deadline) for q in questions))
                )
        except TimeoutError:
            failure = JudgeFailure("timeout", f"no answer within {self.settings.row_timeout:g}s")
            return [failure] * len(questions)
        except JudgeFailure as failure:
            return [failure] * len(questions)

    async def _ask_fields(self, questions: list[Question], deadline: float) -> list[Answer]:
        explain = questions[0].explain
        messages = fields_messages(questions, explain)
        schema = fields_schema(len(questions), explain)
        budget = self.settings.max_tokens

        if self._has_logprobs is not False:
            completion = await self._complete(questions, messages, schema, budget, deadline)
            if completion.tokens is not None:
                readings = read_fields(completion, len(questions))
                if len(readings) < len(questions):
                    retry = [*messages, _assistant(completion), {"role": "user", "content": REASK}]
                    again = await self._complete(questions, retry, schema, budget, deadline)
                    if again.tokens is not None:
                        for number, reading in read_fields(again, len(questions)).items():
                            readings.setdefault(number, reading)
                return [
                    verdict_from_reading(readings.get(n), q, completion.finish_reason)
                    for n, q in enumerate(questions, start=1)
                ]
            self._no_logprobs()
        return await self._vote_fields(questions, messages, schema, budget, deadline)

    async def _ask_single(self, question: Question, deadline: float) -> Answer:
        messages = instruction_messages(question, question.explain)
        budget = EXPLAIN_TOKENS if question.explain else 1
        if self._has_logprobs is not False:
            completion = await self._complete([question], messages, None, budget, deadline)
            if completion.tokens is not None:
                reading = read_single(completion)
                if reading is None:
                    retry = [*messages, _assistant(completion), {"role": "user", "content": REASK}]
                    again = await self._complete([question], retry, None, budget, deadline)
                    reading = read_single(again) if again.tokens is not None else None
                return verdict_from_reading(reading, question, completion.finish_reason)
            self._no_logprobs()
        votes = []
        for vote in range(self.settings.votes):
            completion = await self._complete(
                [question], messages, None, max(budget, 3), deadline, vote=vote
            )
            votes.append(read_single(completion))
        return verdict_from_votes([v for v in votes if v is not None], question, len(votes))

    async def _vote_fields(
        self,
        questions: list[Question],
        messages: Messages,
        schema: dict[str, Any],
        budget: int,
        deadline: float,
    ) -> list[Answer]:
        ballots: list[dict[int, Reading]] = []
        for vote in range(self.settings.votes):
            completion = await self._complete(
                questions, messages, schema, budget, deadline, vote=vote
            )
            ballots.append(read_fields(completion, len(questions)))
        return [
            verdict_from_votes(
                [b[number] for b in ballots if number in b], question, self.settings.votes
            )
            for number, question in enumerate(questions, start=1)
        ]

    def _no_logprobs(self) -> None:
        if self._has_logprobs is not False:
            logger.warning(
                "endpoint %s returned no logprobs; answering by %d sampled votes instead",
                self.settings.base_url or "(default)",
                self.settings.votes,
            )
        self._has_logprobs = False

    # -- one call (cache, negotiation, retries and accounting are the endpoint's) -------------

    async def _complete(
        self,
        questions: Sequence[Question],
        messages: Messages,
        schema: dict[str, Any] | None,
        max_tokens: int,
        deadline: float,
        vote: int | None = None,
    ) -> Completion:
        """One completion for `questions` (all of one row); usage is recorded on the row.

        vote: None for a greedy call with logprobs; else the index of a sampled vote (no
            logprobs, temperature > 0) so that each vote is its own cache entry.
        """
        request = build_request(self.settings, messages, max_tokens, vote)
        try:
            return await self.endpoint.complete(
                request,
                schema=schema,
                deadline=deadline,
                row=row_key(questions[0]),
                cache_as=request_key(request, vote),
            )
        except RequestRejected as rejected:
            if request.get("logprobs") and rejected.form == "none":
                # Some endpoints reject the logprobs parameter outright.
                self._no_logprobs()
                return Completion("", None, "rejected", 0, 0)
            raise


def build_request(
    settings: LLMSettings, messages: Messages, max_tokens: int, vote: int | None
) -> dict[str, Any]:
    """Keyword arguments of `chat.completions.create`, without `response_format` (negotiated
    per endpoint, and left out of the cache key: it shapes the reply, not the verdict)."""
    request: dict[str, Any] = {
        "model": settings.model,
        "messages": messages,
        "max_tokens": max_tokens,
    }
    if vote is None:
        request |= {"temperature": 0.0, "logprobs": True, "top_logprobs": settings.top_logprobs}
    else:
        request["temperature"] = settings.vote_temperature
    return request


def request_key(request: dict[str, Any], vote: int | None) -> str:
    """The judge-call cache key: model, prompt version, prompt and sampling parameters."""
    return cache_key({"prompt_version": PROMPT_VERSION, "vote": vote, **request})


def rubric_requests(settings: LLMSettings, questions: Sequence[Question]) -> list[dict[str, Any]]:
    """The first-try requests (greedy, with logprobs) `OpenAIJudge.answer` makes for
    `questions`: one per rubric, or one per instruction. Used to estimate cost before a run."""
    groups: dict[GroupKey, list[Question]] = {}
    for question in questions:
        groups.setdefault(_group_key(question), []).append(question)
    requests = []
    for group in groups.values():
        explain = group[0].explain
        if settings.strategy == "fields":
            messages = fields_messages(group, explain)
            requests.append(build_request(settings, messages, settings.max_tokens, None))
            continue
        budget = EXPLAIN_TOKENS if explain else 1
        for question in group:
            messages = instruction_messages(question, explain)
            requests.append(build_request(settings, messages, budget, None))
    return requests


def _group_key(question: Question) -> GroupKey:
    return (
        question.detector,
        question.generated_text,
        question.user_query,
        question.context,
        question.explain,
    )


def _assistant(completion: Completion) -> dict[str, str]:
    return {"role": "assistant", "content": completion.content}
