"""Turn request items into detector results: validate, ask the judges, roll verdicts up.

This is the one place that knows the wire contract of a result: `label` is
`follow_probability >= 0.5` on the rounded probability, `score` is the detector's aggregation of
labels, and a judge failure becomes an explicit error, never a number.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import defaultdict
from collections.abc import Collection, Sequence
from typing import Any

from pydantic import ValidationError

from assay.detectors import DETECTORS, Detector
from assay.environment import default_judge_name
from assay.judges import Judge, Question, Verdict, built_judge, get_judge, judge_names
from assay.judges.embedded.text import readable
from assay.judges.isolation import answer_each_item, failure_of, item_groups, shutting_down
from assay.schema import (
    DetectorConfig,
    DetectorError,
    DetectorFailed,
    DetectorResult,
    DetectRequestItem,
    InstructionResult,
    JudgeFailure,
    PublishedItem,
    RequestValidationError,
    find_unencodable,
    followed,
    round_probability,
)

logger = logging.getLogger(__name__)


_TYPE_TAGS = {"str", "int", "float", "bool", "dict", "list", "none"}
#: Longest field name quoted in a message; a hostile key may be megabytes long.
_QUOTED_NAME_CHARS = 60


def field_location(
    index: int | None, loc: Sequence[int | str], members: Collection[str] = ()
) -> str:
    """A pydantic error location as the API names fields: `[0].config.completeness`, or
    `items[0].generated_text` without an item index.

    members: the names of models in a union of the location (pydantic puts union members in
    the location, as it does "str" or "list[str]"; they are not fields)."""
    fields = [
        p
        for p in loc
        if isinstance(p, int) or ("[" not in p and p not in _TYPE_TAGS and p not in members)
    ]
    path = "".join(f"[{part}]" if isinstance(part, int) else f".{_quoted(part)}" for part in fields)
    return f"[{index}]{path}" if index is not None else path.lstrip(".")


def _quoted(name: str) -> str:
    if len(name) > _QUOTED_NAME_CHARS:
        name = f"{name[:_QUOTED_NAME_CHARS]}… ({len(name)} characters)"
    # A name that is not valid Unicode cannot go into a message that is sent as UTF-8.
    return name.encode("utf-8", "backslashreplace").decode("utf-8")


def check_encodable(value: Any, index: int | None = None, json_only: bool = False) -> None:
    """Raise RequestValidationError naming the first string (or key) in `value` that cannot be
    encoded as UTF-8 (a lone surrogate) or holds a NUL: such text passes type checks but breaks
    the tokenizer, the database (PostgreSQL) or HTTP bodies, so it is refused up front.

    index: the item's position, for the message; None when `value` is a whole body.
    json_only: also refuse what JSON cannot carry (see `find_unencodable`).
    """
    found = find_unencodable(value, json_only)
    if found is not None:
        path, problem = found
        raise RequestValidationError(field_location(index, path) or "body", problem)


#: Pydantic's wording for common mistakes, in the words the rest of Assay's messages use.
_MESSAGES = {
    "missing": "is required",
    "bool_type": "must be true or false",
    "string_type": "must be a string",
    "dict_type": "must be a JSON object",
    "model_type": "must be a JSON object",
    "list_type": "must be a list",
}


def _message(kind: str, loc: tuple[Any, ...], pydantic_message: str) -> str:
    """The message for a request item's first validation error (type, location, pydantic's)."""
    if loc[:2] == ("context", "list[str]") and len(loc) == 3:
        return "must be a string (each context document is text)"
    if loc[:1] == ("context",) and len(loc) <= 2 and kind != "value_error":
        # A union: pydantic reports only its first member ("a valid string"); a limit
        # (value_error) says what it is itself.
        return "must be a string or a list of strings"
    if kind == "extra_forbidden":
        model = DetectorConfig if len(loc) == 3 and loc[0] == "config" else DetectRequestItem
        what = "option" if model is DetectorConfig else "field"
        return f"unknown {what}; known {what}s: {', '.join(model.model_fields)}"
    if kind == "too_short" and loc == ("config",):
        return f"must name at least one detector ({', '.join(DETECTORS)})"
    return plain_message(kind, pydantic_message)


def plain_message(kind: str, pydantic_message: str) -> str:
    """Pydantic's message for an error of type `kind`, in Assay's words ("must be a JSON
    object", not "a valid dictionary or instance of DetectorConfig")."""
    if kind in _MESSAGES:
        return _MESSAGES[kind]
    message = pydantic_message.removeprefix("Value error, ").replace("Input should be", "must be")
    if kind == "literal_error":  # JSON's words: "must be true", not Python's "must be True"
        words = {"True": "true", "False": "false", "None": "null"}
        message = re.sub(r"\b(True|False|None)\b", lambda m: words[m[0]], message)
    return message


def parse_item(raw: Any, index: int | None = None, *, registry: bool = True) -> DetectRequestItem:
    """Validate one raw item (a dict) and check its detectors' inputs.

    registry: also check detector and judge names against this process's registries (False
        for an item a server will judge: it may know more of them; the inputs of the detectors
        this process knows are checked either way).
    Raises RequestValidationError whose `field` names the item index and field, e.g.
    `[0].generated_text`.
    """
    if isinstance(raw, DetectRequestItem):
        item = raw
        check_encodable(item.model_dump(), index)
    else:
        if not isinstance(raw, dict):
            raise RequestValidationError(
                field_location(index, []) or "body", "each item must be a JSON object"
            )
        check_encodable(raw, index)
        try:
            item = DetectRequestItem.model_validate(raw)
        except ValidationError as error:
            errors = error.errors()
            # A list of documents with one that is not a string: name that document.
            first = next(
                (
                    e
                    for e in errors
                    if tuple(e["loc"][:2]) == ("context", "list[str]") and len(e["loc"]) == 3
                ),
                errors[0],
            )
            message = _message(first["type"], tuple(first["loc"]), first["msg"])
            raise RequestValidationError(field_location(index, first["loc"]), message) from None
    for name in item.config:
        if name not in DETECTORS:
            if not registry:  # the server may know it; it checks its inputs
                continue
            known = ", ".join(DETECTORS)
            raise RequestValidationError(
                field_location(index, ["config", name]),
                f"unknown detector; known detectors: {known}",
            )
        for field in DETECTORS[name].required_inputs:
            problem = input_problem(item, field)
            if problem:
                raise RequestValidationError(
                    field_location(index, [field]), f"required by detector {name!r} but {problem}"
                )
        judge_name = item.config[name].judge
        if registry and judge_name is not None and judge_name not in judge_names():
            raise RequestValidationError(
                field_location(index, ["config", name, "judge"]),
                f"unknown judge {judge_name!r}; known judges: {', '.join(judge_names())}",
            )
    # Both are stored under the application's name, in process as on a server.
    for flag in ("async_mode", "publish"):
        if getattr(item, flag) and (not item.application_name or not item.model_name):
            missing = "application_name" if not item.application_name else "model_name"
            raise RequestValidationError(
                field_location(index, [missing]), f"required when {flag} is true"
            )
    return item


def parse_items(body: Any, *, registry: bool = True) -> list[DetectRequestItem]:
    """Validate a request body: a list of items (a single object is accepted as a list of one).

    registry: as for `parse_item` (False for a body a server will judge)."""
    if isinstance(body, dict | DetectRequestItem):
        body = [body]
    if not isinstance(body, list):
        raise RequestValidationError("body", "must be a JSON array of request items")
    if not body:
        raise RequestValidationError("body", "must contain at least one item")
    return [parse_item(raw, index, registry=registry) for index, raw in enumerate(body)]


def input_problem(item: DetectRequestItem | PublishedItem, field: str) -> str | None:
    """What is wrong with a detector's required input, or None (a detect item's, or a
    published one's: no detector gives a result without its inputs)."""
    texts = item.context_documents() if field == "context" else [getattr(item, field)]
    texts = [t for t in texts if isinstance(t, str) and t.strip()]
    if not texts:
        return "missing or empty"
    # "<b></b>" is no question: the judges read HTML as the text it renders (the embedded
    # judge crashed on it, and a server answered a retryable 503).
    if not any(readable(t).strip() for t in texts):
        return "holds only markup: no text once its HTML tags are read"
    return None


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
                label=followed(probability),
            )
        )
    return DetectorResult(
        instructions_list=results, score=detector.score([r.label for r in results])
    )


async def _answer(judge: Judge, questions: list[Question]) -> list[Verdict | JudgeFailure]:
    """The judge's answers; a failure that one of the items may have caused never fails the
    others: the batch is answered again item by item."""
    try:
        answers = await judge.answer(questions)
        if len(answers) != len(questions):
            raise RuntimeError(f"judge returned {len(answers)} answers for {len(questions)}")
        return answers
    except JudgeFailure as failure:
        # The judge failed as a whole (e.g. its endpoint is down), on purpose and explicitly.
        return [failure] * len(questions)
    except Exception as error:
        if shutting_down(error):
            raise
        if len(item_groups(questions)) == 1:
            logger.exception("judge %s failed on an item", judge.name)
            return [failure_of(error)] * len(questions)
        logger.warning("judge %s failed on a batch (%s); answering item by item", judge.name, error)
        return await answer_each_item(judge.answer, questions)


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
        # Built off the event loop: building loads the judge's model (0.6 s); later calls
        # find it built and need no thread.
        judged_by = built_judge(backend)
        if judged_by is None:
            judged_by = await asyncio.to_thread(get_judge, backend)
        verdicts = await _answer(judged_by, batch)
        for (item_index, name, _), verdict in zip(plan[backend], verdicts, strict=True):
            answers[(item_index, name)].append(verdict)

    responses: list[dict[str, Any]] = []
    for item_index, item in enumerate(items):
        response: dict[str, Any] = {}
        for name, config in item.config.items():
            result = build_result(DETECTORS[name], answers[(item_index, name)], config.explain)
            if isinstance(result, DetectorError) and item.must_compute == "all_or_none":
                failure = JudgeFailure(result.kind, result.message)
                raise DetectorFailed(name, failure, item_index)
            response[name] = result.model_dump(mode="json")
        responses.append(response)
    return responses


def failed_results(
    items: Sequence[DetectRequestItem], failure: JudgeFailure
) -> list[dict[str, Any]]:
    """Results for items none of whose detectors could be judged (e.g. judging ran out of
    time): each detector's key holds the error object.

    Raises DetectorFailed, as `detect_items` does, when an item's `must_compute` is
    `all_or_none`.
    """
    responses: list[dict[str, Any]] = []
    error = DetectorError(kind=failure.kind, message=failure.message).model_dump(mode="json")
    for index, item in enumerate(items):
        if item.must_compute == "all_or_none":
            raise DetectorFailed(next(iter(item.config)), failure, index)
        responses.append({name: dict(error) for name in item.config})
    return responses
