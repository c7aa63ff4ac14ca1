"""EmbeddedJudge: answers instructions offline from sentence embeddings and calibrated checks."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from assay.judges.base import Judge, Question, Verdict
from assay.judges.embedded.agreement_model import AgreementModel, load_agreement_model
from assay.judges.embedded.calibration import Calibration, load_calibration
from assay.judges.embedded.embedding_cache import shared_encoder
from assay.judges.embedded.encoder import Encoder, Matrix
from assay.judges.embedded.explanations import explain
from assay.judges.embedded.signals import (
    CHECK_FEATURES,
    Evidence,
    completeness_features,
    relevance_features,
    shared_features,
)
from assay.judges.isolation import answer_each_item_sync, failure_of, item_groups, shutting_down
from assay.schema import JudgeFailure

logger = logging.getLogger(__name__)

ItemKey = tuple[str, str | None, tuple[str, ...]]
RELEVANCE_CHECKS = frozenset(
    ("core_intent", "prioritize_relevant", "no_tangents", "no_misinterpretation")
)


class EmbeddedJudge(Judge):
    """The offline default judge.

    encoder: a loaded encoder; by default the one the shipped calibration was fitted for,
        behind the process-wide embedding cache.
    calibration: fitted coefficients; by default the shipped `calibration.json`.
    agreement: the agreement model the completeness checks read sentence pairs with; by
        default the shipped one, loaded when a completeness question first comes.
    """

    name = "embedded"

    def __init__(
        self,
        encoder: Encoder | None = None,
        calibration: Calibration | None = None,
        agreement: AgreementModel | None = None,
    ) -> None:
        self.calibration = calibration or load_calibration()
        self.encoder = encoder or shared_encoder(self.calibration.encoder)
        self.agreement = agreement

    async def answer(self, questions: Sequence[Question]) -> list[Verdict | JudgeFailure]:
        # Model work is CPU-bound: keep it off the event loop.
        return await asyncio.to_thread(self.answer_sync, questions)

    def answer_sync(self, questions: Sequence[Question]) -> list[Verdict | JudgeFailure]:
        unknown = [q.check for q in questions if q.check not in CHECK_FEATURES]
        if unknown:
            failure = JudgeFailure("unsupported", f"embedded judge has no check {unknown[0]!r}")
            return [failure] * len(questions)
        try:
            evidence = gather(self.encoder, questions, self.agreement)
        except Exception as error:
            if shutting_down(error):
                raise
            if len(item_groups(questions)) > 1:
                # One item can break the encoder call for all (a text the tokenizer refuses):
                # answer each item on its own so that only the item at fault is unscored.
                logger.warning("a batch failed (%s); answering item by item", error)
                return answer_each_item_sync(self.answer_sync, questions)
            logger.exception("embedded judge failed")
            return [failure_of(error)] * len(questions)
        verdicts: list[Verdict | JudgeFailure] = []
        for question in questions:
            ev = evidence[_key(question)]
            refused = ev.too_long
            if question.check not in RELEVANCE_CHECKS:
                refused = refused or ev.context_refused
            if refused is not None:
                verdicts.append(JudgeFailure("input_too_long", refused))
                continue
            model = self.calibration.checks[question.check]
            probability = model.probability(ev.features)
            verdicts.append(
                Verdict(
                    follow_probability=probability,
                    explanation=explain(question.check, ev, probability, model.pull(ev.features))
                    if question.explain
                    else "",
                    evidence={name: round(ev.features[name], 4) for name in model.features},
                )
            )
        return verdicts


def _key(question: Question) -> ItemKey:
    return (question.generated_text, question.user_query, question.context)


def gather(
    encoder: Encoder,
    questions: Sequence[Question],
    agreement: AgreementModel | None = None,
) -> dict[ItemKey, Evidence]:
    """Build each distinct item's evidence: every text of the batch is encoded in one call, and
    every sentence pair the completeness checks need is read by the agreement model in one call.

    agreement: the agreement model; by default the shipped one, loaded when first needed.
    """
    needs: dict[ItemKey, set[str]] = {}
    for question in questions:
        kind = "relevance" if question.check in RELEVANCE_CHECKS else "completeness"
        needs.setdefault(_key(question), set()).add(kind)
    # The relevance checks read no context: it is neither split, encoded nor counted against
    # the judge's limits (a long context made output_relevance fail as input_too_long).
    evidence: dict[ItemKey, Evidence] = {}
    for key, kinds in needs.items():
        response, query, context = key
        ev = Evidence(response, query, context if "completeness" in kinds else ())
        refused = ev.context_too_long
        if refused:
            ev = Evidence(response, query, ())
            ev.context_refused = refused
            kinds.discard("completeness")
        evidence[key] = ev
    # An item the judge refuses (`Evidence.too_long`) is neither encoded nor read.
    judged = {key: ev for key, ev in evidence.items() if ev.too_long is None}
    texts = list(dict.fromkeys(t for ev in judged.values() for t in ev.texts()))
    matrix = encoder.encode(texts)
    index = {text: row for row, text in enumerate(texts)}

    def lookup(text: str) -> Matrix:
        row: Matrix = matrix[index[text]]
        return row

    pairs: dict[tuple[str, str], int] = {}
    for key, ev in judged.items():
        ev.attach(lookup)
        if "completeness" in needs[key]:
            for pair in ev.plan_pairs():
                pairs.setdefault(pair, len(pairs))
    if pairs:
        model = agreement or load_agreement_model()
        answers = model.predict(list(pairs))
        for ev in judged.values():
            ev.agreement = {p: answers[pairs[p]] for p in ev.context_pairs + ev.own_pairs}
    for key, ev in judged.items():
        shared_features(ev)
        if "relevance" in needs[key]:
            relevance_features(ev)
        if "completeness" in needs[key]:
            completeness_features(ev)
    return evidence
