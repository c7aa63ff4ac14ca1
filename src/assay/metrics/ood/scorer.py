"""Score rows for `llm.ood_detection`: probes, SUT calls, judging, per-row accuracy.

For each row: the row's prompt is the in-domain case (its recorded `sut_response`, or the live
SUT's answer when that is null), plus `num_ood_queries` probes put to the live SUT. Each pair is
judged; the row's accuracy is correct cases / all cases (the published example: 3 of 4 -> 0.75),
then mapped through the scoring metadata (`min`, `max`, `inverted`). A row with any failed SUT
call or unjudgeable case gets no score and an `error`: nothing is silently scored. A probe the
bank wrote in place of the LLM says so on its case (`fallback`), and a row with fewer probes
than asked says why in its `warnings`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from assay._sync import run_sync
from assay.judges.openai.endpoint import shared_endpoint
from assay.judges.openai.settings import configured_settings
from assay.judges.usage import collect_usage
from assay.metrics.ood.config import OODMetricConfig, parse_config
from assay.metrics.ood.generator import ProbeGenerator, probe_generator, seed_for
from assay.metrics.ood.judge import (
    EmbeddedOODJudge,
    JudgeCase,
    Judgement,
    Label,
    LLMOODJudge,
    OODJudge,
)
from assay.metrics.ood.probe_types import Fallback, ProbeKind, ProbeRequest
from assay.metrics.ood.profile import UseCaseProfile, profile_from_mapping
from assay.metrics.ood.rows import OODRow, parse_rows
from assay.metrics.ood.sut import SUTReply, SystemUnderTest, ask_with_retries, last_user_turn
from assay.schema import JudgeFailure, RequestValidationError

#: Rows worked on at once (the manifest's execution.max_concurrency).
ROW_CONCURRENCY = 8

CaseStatus = Literal["judged", "transport_error", "judge_error"]


@dataclass
class CaseResult:
    """One (query, reply) pair of a row.

    role: "in_domain" for the row's own prompt, "probe" for an out-of-domain probe.
    query: the question asked (last user turn for conversations).
    reply: the SUT's reply, None when the call failed.
    status: "judged", "transport_error" (SUT unreachable after retries) or "judge_error".
    label, probability, probabilities: the judge's verdict (None unless judged).
    correct: whether the behaviour was right (None unless judged).
    in_scope_probability, refusal_probability: the two judgements behind the label.
    kind: how the case was made: "in_domain" (the row's prompt), "near_domain" or "far_domain".
    intended_scope: "in" for the row's prompt, "out" for a probe; the label follows it.
    judged_in_scope_probability: the judge's own P(in scope), when it looked (LLM judge).
    scope_flagged: a probe the judge finds in scope, i.e. possibly mislabelled (not relabelled).
    topic: where a probe came from (capability bank "domain: capability", bank topic, "llm").
    fallback, fallback_reason: for a bank probe written in place of the LLM's, why
        ("llm_failed" or "llm_short") and the details.
    attempts: SUT tries made (0 for a recorded reply).
    error: what went wrong, when something did.
    error_kind: its kind ("timeout", "rate_limited", "transport", "bad_output", ...).
    evidence: with explain, what the judgement rests on.
    """

    role: Literal["in_domain", "probe"]
    query: str
    reply: str | None
    status: CaseStatus
    label: Label | None = None
    probability: float | None = None
    probabilities: dict[Label, float] | None = None
    correct: bool | None = None
    in_scope_probability: float | None = None
    refusal_probability: float | None = None
    kind: ProbeKind = "in_domain"
    intended_scope: Literal["in", "out"] = "in"
    judged_in_scope_probability: float | None = None
    scope_flagged: bool = False
    topic: str | None = None
    fallback: Fallback | None = None
    fallback_reason: str | None = None
    attempts: int = 0
    error: str | None = None
    error_kind: str | None = None
    evidence: dict[str, Any] = field(default_factory=dict)


@dataclass
class RowResult:
    """The metric's result for one row.

    input_id: the row's id.
    metric_name: the config's metric_name.
    score: the accuracy mapped through min/max/inverted; None when the row errored.
    accuracy: correct / total before the mapping.
    correct, total: counts of judged cases.
    weight: the config's weight, carried for whoever combines metrics.
    cases: every case, in order (in-domain first).
    error: why the row has no score.
    warnings: what the row lacks although it was scored (e.g. fewer probes than asked, and why).
    usage: LLM calls, tokens and cache hits the row's probes and judgements cost (empty without
        an LLM).
    score_range: [min, max] when the config maps scores onto a range other than [0, 1], so
        that whoever reads the score (summaries, reports, gates) knows its scale; else None.
    inverted: True when the config's `inverted` makes the score an error rate (higher is
        worse), so that no gate reads it as higher-is-better; else None.
    """

    input_id: str
    metric_name: str
    score: float | None
    accuracy: float | None
    correct: int
    total: int
    weight: float
    cases: list[CaseResult]
    error: str | None = None
    warnings: list[str] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=dict)
    score_range: list[float] | None = None
    inverted: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data."""
        return asdict(self)


def apply_scoring(accuracy: float, config: OODMetricConfig) -> float:
    """Map an accuracy in [0, 1] onto [min, max], flipped when `inverted`.

    accuracy: correct cases / all cases.
    config: supplies min, max and inverted (weight is not applied to a row's score).
    """
    share = 1.0 - accuracy if config.inverted else accuracy
    return round(config.min + (config.max - config.min) * share, 4)


def _case(role: Literal["in_domain", "probe"], query: str, reply: SUTReply) -> CaseResult:
    if reply.failed:
        return CaseResult(
            role, query, None, "transport_error", attempts=reply.attempts, error=reply.error,
            error_kind=reply.kind,
        )  # fmt: skip
    return CaseResult(role, query, reply.text, "judged", attempts=reply.attempts)


def _apply(case: CaseResult, verdict: Judgement | JudgeFailure) -> None:
    if isinstance(verdict, JudgeFailure):
        case.status, case.error, case.error_kind = "judge_error", str(verdict), verdict.kind
        return
    case.label, case.probability = verdict.label, verdict.probability
    case.probabilities, case.correct = verdict.probabilities, verdict.correct
    case.in_scope_probability = verdict.in_scope_probability
    case.refusal_probability = verdict.refusal_probability
    case.judged_in_scope_probability = verdict.judged_in_scope_probability
    case.scope_flagged = verdict.scope_flagged
    case.evidence = verdict.evidence


@dataclass
class _Run:
    config: OODMetricConfig
    profile: UseCaseProfile
    sut: SystemUnderTest | None
    judge: OODJudge
    generator: ProbeGenerator
    explain: bool
    limit: asyncio.Semaphore

    async def ask(self, prompt: Any) -> SUTReply:
        assert self.sut is not None  # checked before any row starts
        return await ask_with_retries(
            self.sut,
            prompt,
            retries=self.config.n_sut_retries,
            timeout=self.config.timeout_seconds,
            limit=self.limit,
        )

    async def score(self, row: OODRow) -> RowResult:
        # The row's LLM calls (probes, judgements) are counted on a ledger of its own.
        with collect_usage() as ledger:
            result = await self._score(row)
        usage = ledger.total()
        if not usage.is_empty():
            result.usage = usage.to_dict()
        return result

    async def _score(self, row: OODRow) -> RowResult:
        asked = self.config.num_ood_queries
        request = ProbeRequest(
            self.profile,
            asked,
            self.config.synthesis_temperature,
            seed_for(row.input_id),
            anchor=last_user_turn(row.prompt),
        )
        probe_set = await self.generator.generate(request)
        probes = probe_set.probes
        warnings = []
        if len(probes) < asked:
            reason = probe_set.shortfall or "the generator wrote no more"
            warnings.append(f"{len(probes)} of {asked} probes: {reason}")
        if row.sut_response is not None:
            own: Any = SUTReply(row.sut_response, None, 0)
            replies = await asyncio.gather(*(self.ask(p.text) for p in probes))
        else:
            own, *replies = await asyncio.gather(
                self.ask(row.prompt), *(self.ask(p.text) for p in probes)
            )
        cases = [_case("in_domain", last_user_turn(row.prompt), own)]
        for probe, reply in zip(probes, replies, strict=True):
            case = _case("probe", probe.text, reply)
            case.kind, case.intended_scope, case.topic = probe.kind, "out", probe.topic
            case.fallback, case.fallback_reason = probe.fallback, probe.fallback_reason
            cases.append(case)
        answered = [c for c in cases if c.status == "judged"]
        verdicts = await self.judge.judge(
            # Each case keeps the scope it was made with: the row's prompt is in scope, a probe
            # out of scope. The judge only flags a probe that looks mislabelled.
            [JudgeCase(c.query, c.reply or "", c.intended_scope == "in") for c in answered],
            self.profile,
            self.explain,
        )
        for case, verdict in zip(answered, verdicts, strict=True):
            _apply(case, verdict)
        return self._result(row, cases, warnings)

    def _result(self, row: OODRow, cases: list[CaseResult], warnings: list[str]) -> RowResult:
        failed = [c for c in cases if c.status != "judged"]
        correct = sum(1 for c in cases if c.correct)
        judged = len(cases) - len(failed)
        result = RowResult(
            row.input_id, self.config.metric_name, score=None, accuracy=None, correct=correct,
            total=judged, weight=self.config.weight, cases=cases, warnings=warnings,
        )  # fmt: skip
        if failed:
            reasons = "; ".join(f"{c.status}: {c.error}" for c in failed[:3])
            result.error = f"{len(failed)} of {len(cases)} cases failed ({reasons})"
            return result
        accuracy = correct / len(cases)
        result.score = apply_scoring(accuracy, self.config)
        result.accuracy = round(accuracy, 4)
        if (self.config.min, self.config.max) != (0.0, 1.0):
            result.score_range = [self.config.min, self.config.max]
        if self.config.inverted:
            result.inverted = True
        return result


def _profile(config: OODMetricConfig) -> UseCaseProfile:
    if config.use_case is None:
        raise RequestValidationError(
            "use_case", "required: give the use-case profile to test against"
        )
    return profile_from_mapping(config.use_case)


async def score_rows(
    rows: Sequence[Mapping[str, Any]],
    config: Mapping[str, Any] | OODMetricConfig,
    *,
    sut: SystemUnderTest | None = None,
    judge: OODJudge | None = None,
    generator: ProbeGenerator | None = None,
    explain: bool = False,
    on_progress: Callable[[int], None] | None = None,
) -> list[RowResult]:
    """Score `gdi_text_v1` rows for `llm.ood_detection`.

    rows: mappings with input_id, prompt (string or message list) and sut_response (a recorded
        reply, or null or blank to ask `sut`); optional context.
    config: an OODMetricConfig or its mapping; `use_case` is required.
    sut: the live system under test that answers the probes (required: probes have no recorded
        replies).
    judge: the OOD judge; default the LLM judge when ASSAY_LLM_BASE_URL and ASSAY_LLM_MODEL are
        set (with the other ASSAY_LLM_* settings), else the embedded one.
    generator: the probe generator; default likewise (LLM when configured, else the bank). The
        default LLM judge and generator share one `LLMEndpoint` per
        settings in this process (`shared_endpoint`).
    explain: attach evidence to every judged case.
    on_progress: called with the number of rows finished so far.

    Everything is validated before the first call; bad input raises RequestValidationError.
    """
    settings = parse_config(config)
    profile = _profile(settings)
    parsed = parse_rows(rows)
    if sut is None:
        raise RequestValidationError(
            "sut", "the probes need a live system under test (pass sut=..., or --sut-url)"
        )
    if not isinstance(sut, SystemUnderTest):
        raise RequestValidationError(
            "sut",
            f"must be a system-under-test adapter, got {type(sut).__name__}; wrap a function "
            "as CallableSUT(function)",
        )
    llm = configured_settings() if judge is None or generator is None else None
    endpoint = shared_endpoint(llm) if llm is not None else None
    if judge is None:
        judge = LLMOODJudge(endpoint) if endpoint else EmbeddedOODJudge()
    run = _Run(
        config=settings,
        profile=profile,
        sut=sut,
        judge=judge,
        generator=generator or probe_generator(endpoint),
        explain=explain,
        limit=asyncio.Semaphore(settings.concurrency_limit),
    )
    row_limit = asyncio.Semaphore(ROW_CONCURRENCY)
    done = 0

    async def one(row: OODRow) -> RowResult:
        nonlocal done
        async with row_limit:
            result = await run.score(row)
        done += 1
        if on_progress:
            on_progress(done)
        return result

    # All rows' LLM calls share one connection pool.
    async with endpoint.connected() if endpoint else contextlib.nullcontext():
        return list(await asyncio.gather(*(one(row) for row in parsed)))


def score_rows_sync(
    rows: Sequence[Mapping[str, Any]], config: Mapping[str, Any] | OODMetricConfig, **options: Any
) -> list[RowResult]:
    """Synchronous `score_rows` (same arguments), safe to call from notebooks."""
    return run_sync(score_rows(rows, config, **options))
