"""Turn request items into detector results: validate, ask the judges, roll verdicts up.

This is the one place that knows the wire contract of a result: `label` is
`follow_probability >= 0.5` on the rounded probability, `score` is the detector's aggregation of
labels, and a judge failure becomes an explicit error, never a number.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from assay.detectors import DETECTORS, Detector
from assay.judges import Question, Verdict, get_judge, judge_names
from assay.schema import (
    DetectorError,
    DetectorFailed,
    DetectorResult,
    DetectRequestItem,
    InstructionResult,
    JudgeFailure,
    RequestValidationError,
    round_probability,
)

DEFAULT_JUDGE_ENV = "ASSAY_JUDGE"


def default_judge_name() -> str:
    return os.environ.get(DEFAULT_JUDGE_ENV, "embedded")


_TYPE_TAGS = {"str", "int", "float", "bool", "dict", "list", "none"}


def _location(index: int | None, loc: Sequence[int | str]) -> str:
    # pydantic puts union members in the location ("str", "list[str]"); they are not fields.
    fields = [p for p in loc if isinstance(p, int) or ("[" not in p and p not in _TYPE_TAGS)]
    path = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in fields)
    return f"[{index}]{path}" if index is not None else path.lstrip(".")


def parse_item(raw: Any, index: int | None = None) -> DetectRequestItem:
    """Validate one raw item (a dict) and check its detectors' inputs.

    Raises RequestValidationError whose `field` names the item index and field, e.g.
    `[0].generated_text`.
    """
    if isinstance(raw, DetectRequestItem):
        item = raw
    else:
        if not isinstance(raw, dict):
            raise RequestValidationError(
                _location(index, []) or "body", "each item must be a JSON object"
            )
        try:
            item = DetectRequestItem.model_validate(raw)
        except ValidationError as error:
            first = error.errors()[0]
            message = first["msg"].removeprefix("Value error, ")
            raise RequestValidationError(_location(index, first["loc"]), message) from None
    for name in item.config:
        if name not in DETECTORS:
            known = ", ".join(DETECTORS)
            raise RequestValidationError(
                _location(index, ["config", name]), f"unknown detector; known detectors: {known}"
            )
        for field in DETECTORS[name].required_inputs:
            if not _has_input(item, field):
                raise RequestValidationError(
                    _location(index, [field]), f"required by detector {name!r} but missing or empty"
                )
        judge_name = item.config[name].judge
        if judge_name is not None and judge_name not in judge_names():
            raise RequestValidationError(
                _location(index, ["config", name, "judge"]),
                f"unknown judge {judge_name!r}; known judges: {', '.join(judge_names())}",
            )
    if item.publish and (not item.application_name or not item.model_name):
        missing = "application_name" if not item.application_name else "model_name"
        raise RequestValidationError(_location(index, [missing]), "required when publish is true")
    return item


def parse_items(body: Any) -> list[DetectRequestItem]:
    """Validate a request body: a list of items (a single object is accepted as a list of one)."""
    if isinstance(body, dict | DetectRequestItem):
        body = [body]
    if not isinstance(body, list):
        raise RequestValidationError("body", "must be a JSON array of request items")
    if not body:
        raise RequestValidationError("body", "must contain at least one item")
    return [parse_item(raw, index) for index, raw in enumerate(body)]


def _has_input(item: DetectRequestItem, field: str) -> bool:
    if field == "context":
        return bool(item.context_documents())
    value = getattr(item, field)
    return isinstance(value, str) and bool(value.strip())


def questions_for(item: DetectRequestItem, detector: Detector) -> list[Question]:
    config = item.config[detector.name]
    return [
        Question(
            detector=detector.name,
            check=instruction.check,
            instruction=instruction.text,
            generated_text=item.generated_text,
            user_query=item.user_query,
            context=tuple(item.context_documents()),
            explain=config.explain,
        )
        for instruction in detector.instructions
    ]


def build_result(
    detector: Detector, answers: Sequence[Verdict | JudgeFailure], explain: bool
) -> DetectorResult | DetectorError:
    """Roll one detector's verdicts into its wire result; any failure fails the detector."""
    failures = [answer for answer in answers if isinstance(answer, JudgeFailure)]
    if failures:
        return DetectorError(kind=failures[0].kind, message=failures[0].message)
    results = []
    for instruction, verdict in zip(detector.instructions, answers, strict=True):
        assert isinstance(verdict, Verdict)
        probability = round_probability(verdict.follow_probability)
        results.append(
            InstructionResult(
                explanation=verdict.explanation if explain else "",
                follow_probability=probability,
                instruction=instruction.text,
                label=probability >= 0.5,
            )
        )
    return DetectorResult(
        instructions_list=results, score=detector.score([r.label for r in results])
    )


async def detect_items(
    items: Sequence[DetectRequestItem], judge: str | None = None
) -> list[dict[str, Any]]:
    """Score validated items. Returns one dict per item: detector name -> wire result.

    judge: backend for detectors whose config names none (default: $ASSAY_JUDGE or "embedded").
    Raises DetectorFailed for an item with `must_compute="all_or_none"` whose detector failed.
    """
    fallback = judge or default_judge_name()
    # Group every question of every item by backend, so each backend gets one batched call.
    plan: dict[str, list[tuple[int, str, int]]] = defaultdict(list)
    questions: dict[str, list[Question]] = defaultdict(list)
    for item_index, item in enumerate(items):
        for name, config in item.config.items():
            backend = config.judge or fallback
            for offset, question in enumerate(questions_for(item, DETECTORS[name])):
                plan[backend].append((item_index, name, offset))
                questions[backend].append(question)

    answers: dict[tuple[int, str], list[Verdict | JudgeFailure]] = defaultdict(list)
    for backend, batch in questions.items():
        try:
            verdicts = await get_judge(backend).answer(batch)
        except JudgeFailure as failure:
            verdicts = [failure] * len(batch)
        for (item_index, name, _), verdict in zip(plan[backend], verdicts, strict=True):
            answers[(item_index, name)].append(verdict)

    responses: list[dict[str, Any]] = []
    for item_index, item in enumerate(items):
        response: dict[str, Any] = {}
        for name, config in item.config.items():
            result = build_result(DETECTORS[name], answers[(item_index, name)], config.explain)
            if isinstance(result, DetectorError) and item.must_compute == "all_or_none":
                raise DetectorFailed(name, JudgeFailure(result.kind, result.message))
            response[name] = result.model_dump(mode="json")
        responses.append(response)
    return responses
