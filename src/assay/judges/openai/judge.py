"""OpenAIJudge: answers instructions with an LLM behind any OpenAI-compatible endpoint.

Questions are grouped per row and detector ("a rubric"). With the "fields" strategy a rubric is
one call whose JSON reply has one answer per instruction; with "per_instruction" each
instruction is a 1-token call over a shared prompt prefix. Either way each instruction's
`follow_probability` is P(yes) read from the logprobs at that answer's own token. An endpoint
whose probe showed no `top_logprobs` is asked k times at temperature > 0 and the share of yes
votes is used instead; such verdicts say so. A reply whose answers cannot all be read is
re-asked once; after that, the instructions still unanswered are explicit failures. Calls go
through the shared LLM layer (`endpoint.LLMEndpoint`: capability probe, retries, concurrency,
cache, usage); only replies whose every answer was read are cached.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from assay.judges.base import Judge, Question, Verdict
from assay.judges.cache import CallCache
from assay.judges.openai.calls import Completion
from assay.judges.openai.endpoint import LLMEndpoint
from assay.judges.openai.parsing import Reading, read_fields, read_single
from assay.judges.openai.prompts import (
    PROMPT_VERSION,
    REASK,
    Messages,
    assistant_turn,
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

    def verdict_settings(self) -> dict[str, object]:
        """What decides its verdicts besides the questions (see `LLMSettings`)."""
        return {"llm": self.settings.verdict_settings()}

    # -- the Judge interface ---------------------------------------------------------------

    async def answer(self, questions: Sequence[Question]) -> list[Answer]:
        # Identical rows in one batch are asked once and share the answer: grouped together,
        # their instructions went into one prompt twice, and each copy got its own verdict.
        distinct, where = _distinct(questions)
        if len(distinct) < len(questions):
            answers = await self.answer(distinct)
            return [answers[i] for i in where]
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
                found = await self.endpoint.capabilities(
                    row=row_key(questions[0]), deadline=deadline
                )
                if not found.logprobs:
                    return await self._vote(questions, deadline)
                if self.settings.strategy == "fields":
                    return await self._ask_fields(questions, deadline)
                return list(
                    await asyncio.gather(*(self._ask_single(q, deadline) for q in questions))
                )
        except TimeoutError:
            failure = JudgeFailure(
                "timeout",
                f"no answer within {self.settings.row_timeout:g}s (row_timeout; raise it with "
                "ASSAY_LLM_ROW_TIMEOUT or --llm row_timeout=...)",
            )
            return [failure] * len(questions)
        except JudgeFailure as failure:
            return [failure] * len(questions)

    async def _ask_fields(self, questions: list[Question], deadline: float) -> list[Answer]:
        count = len(questions)
        messages = fields_messages(questions, questions[0].explain)
        schema = fields_schema(count, questions[0].explain)

        def complete(reply: Completion) -> bool:
            readings = read_fields(reply, count)
            return len(readings) == count and all(r.odds is not None for r in readings.values())

        completion = await self._complete(questions, messages, schema, deadline, None, complete)
        readings = read_fields(completion, count)
        if len(readings) < count:
            retry = [*messages, assistant_turn(completion.content), _reask()]
            again = await self._complete(questions, retry, schema, deadline, None, complete)
            for number, reading in read_fields(again, count).items():
                readings.setdefault(number, reading)
        return [
            verdict_from_reading(
                readings.get(n), q, completion.finish_reason, self.settings.min_answer_mass
            )
            for n, q in enumerate(questions, start=1)
        ]

    async def _ask_single(self, question: Question, deadline: float) -> Answer:
        messages = instruction_messages(question, question.explain)

        def complete(reply: Completion) -> bool:
            reading = read_single(reply)
            return reading is not None and reading.odds is not None

        completion = await self._complete([question], messages, None, deadline, None, complete)
        reading = read_single(completion)
        if reading is None:
            retry = [*messages, assistant_turn(completion.content), _reask()]
            again = await self._complete([question], retry, None, deadline, None, complete)
            reading = read_single(again)
        return verdict_from_reading(
            reading, question, completion.finish_reason, self.settings.min_answer_mass
        )

    async def _vote(self, questions: list[Question], deadline: float) -> list[Answer]:
        """The sampled-vote method, for an endpoint that lists no logprobs: `votes` answers at
        `vote_temperature`, P(yes) = the share of yes."""
        if self.settings.strategy == "per_instruction":
            return list(await asyncio.gather(*(self._vote_single(q, deadline) for q in questions)))
        count = len(questions)
        messages = fields_messages(questions, questions[0].explain)
        schema = fields_schema(count, questions[0].explain)
        ballots: list[dict[int, Reading]] = []
        for vote in range(self.settings.votes):
            completion = await self._complete(
                questions,
                messages,
                schema,
                deadline,
                vote,
                lambda reply: len(read_fields(reply, count)) == count,
            )
            ballots.append(read_fields(completion, count))
        return [
            verdict_from_votes(
                [b[number] for b in ballots if number in b], question, self.settings.votes
            )
            for number, question in enumerate(questions, start=1)
        ]

    async def _vote_single(self, question: Question, deadline: float) -> Answer:
        messages = instruction_messages(question, question.explain)
        votes = []
        for vote in range(self.settings.votes):
            completion = await self._complete(
                [question],
                messages,
                None,
                deadline,
                vote,
                lambda reply: read_single(reply) is not None,
            )
            votes.append(read_single(completion))
        return verdict_from_votes([v for v in votes if v is not None], question, len(votes))

    # -- one call (probe, cache, retries and accounting are the endpoint's) -------------------

    async def _complete(
        self,
        questions: Sequence[Question],
        messages: Messages,
        schema: dict[str, Any] | None,
        deadline: float,
        vote: int | None,
        cacheable: Callable[[Completion], bool],
    ) -> Completion:
        """One completion for `questions` (all of one row); usage is recorded on the row.

        vote: None for a greedy call with logprobs; else the index of a sampled vote (no
            logprobs, temperature > 0) so that each vote is its own cache entry.
        cacheable: whether a reply may be cached (all its answers were read).
        """
        explain = questions[0].explain
        budget = _budget(self.settings, explain)
        request = build_request(self.settings, messages, budget, vote, single=schema is None)
        return await self.endpoint.complete(
            request,
            schema=schema,
            deadline=deadline,
            row=row_key(questions[0]),
            cache_tag=request_tag(vote),
            cacheable=cacheable,
        )


def _budget(settings: LLMSettings, explain: bool) -> int:
    if settings.strategy == "fields":
        return settings.max_tokens
    return EXPLAIN_TOKENS if explain else 1


def _reask() -> dict[str, str]:
    return {"role": "user", "content": REASK}


def build_request(
    settings: LLMSettings,
    messages: Messages,
    max_tokens: int,
    vote: int | None,
    *,
    single: bool = False,
) -> dict[str, Any]:
    """Keyword arguments of `chat.completions.create`, without `response_format` (the
    endpoint adds the form its probe found). single: a per-instruction call (no schema)."""
    request: dict[str, Any] = {
        "model": settings.model,
        "messages": messages,
        "max_tokens": max_tokens,
    }
    if vote is None:
        request |= {"temperature": 0.0, "logprobs": True, "top_logprobs": settings.top_logprobs}
    else:
        request["temperature"] = settings.vote_temperature
        if single:
            request["max_tokens"] = max(max_tokens, 3)  # room for " yes" or "No."
    return request


def request_tag(vote: int | None) -> dict[str, Any]:
    """What, besides the request, decides a judge call's answer: the prompt version (how
    prompts are written and answers read) and the vote's index."""
    return {"prompt_version": PROMPT_VERSION, "vote": vote}


@dataclass(frozen=True)
class PlannedCall:
    """A first-try call `OpenAIJudge.answer` would make: its request, answer schema (None for
    a per-instruction call) and how many instructions it asks."""

    request: dict[str, Any]
    schema: dict[str, Any] | None
    questions: int


def rubric_requests(
    settings: LLMSettings, questions: Sequence[Question], vote: int | None = None
) -> list[PlannedCall]:
    """The first-try calls `OpenAIJudge.answer` makes for `questions`: one per rubric, or one
    per instruction; greedy with logprobs, or (vote: its index) one sampled vote of each. Used
    to estimate cost before a run."""
    groups: dict[GroupKey, list[Question]] = {}
    for question in _distinct(questions)[0]:  # identical rows are asked once
        groups.setdefault(_group_key(question), []).append(question)
    planned = []
    for group in groups.values():
        explain = group[0].explain
        budget = _budget(settings, explain)
        if settings.strategy == "fields":
            request = build_request(settings, fields_messages(group, explain), budget, vote)
            planned.append(PlannedCall(request, fields_schema(len(group), explain), len(group)))
            continue
        for question in group:
            messages = instruction_messages(question, explain)
            request = build_request(settings, messages, budget, vote, single=True)
            planned.append(PlannedCall(request, None, 1))
    return planned


def _distinct(questions: Sequence[Question]) -> tuple[list[Question], list[int]]:
    """The questions without repeats (an identical row's), and where each question's answer is
    among them."""
    seen: dict[Question, int] = {}
    where = [seen.setdefault(question, len(seen)) for question in questions]
    return list(seen), where


def _group_key(question: Question) -> GroupKey:
    return (
        question.detector,
        question.generated_text,
        question.user_query,
        question.context,
        question.explain,
    )
