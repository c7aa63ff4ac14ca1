"""`POST /v1/applications/{name}/detections`: store results scored elsewhere.

`assay run --publish` scores a dataset on the caller's machine and sends the results here in
batches, so a nightly evaluation shows on the dashboard like live traffic. Each item is stored
under a request id derived from the application, the model, the run's id and the item's key, and
an item whose id is already stored is skipped: a batch sent again (a retry after a lost answer, a
resumed run) is stored once, while the same run published to another application or model is
stored there too (and says nothing about what other applications hold).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from fastapi import APIRouter, Request
from pydantic import ValidationError
from sqlalchemy.exc import IntegrityError

from assay.detectors import DETECTORS
from assay.detectors.evaluate import check_encodable, field_location, input_problem, plain_message
from assay.schema import (
    APPLICATION_NAME_PATTERN,
    APPLICATION_NAME_RULE,
    DetectorError,
    DetectorResult,
    PublishedItem,
    PublishRequest,
    RequestValidationError,
    check_name,
    followed,
)
from assay.server.auth import require_key
from assay.server.body import check_limits, read_json_body
from assay.server.errors import ErrorBody, ServerError
from assay.store.detections import StoredText, add_result_rows, stored_request_ids

router = APIRouter()
#: The models a published result may be; pydantic names them in an error's location.
RESULT_MODELS = (DetectorResult.__name__, DetectorError.__name__)

#: Namespace of the request ids of published items (uuid5 of application, model, run id, key).
PUBLISHED_NAMESPACE = uuid.UUID("6f1d8a52-3c1e-4e0b-9a57-2d4f3c8e9b10")

_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": description}
    for status, description in {
        400: "Body is not acceptable JSON.",
        401: "Missing or invalid API key.",
        404: "The API key may not publish to this application.",
        413: "Body or batch larger than the configured limits.",
        415: "Content-Type is not application/json.",
        422: "The body is invalid: the message names the field.",
    }.items()
}
_REQUEST_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/PublishRequest"}}
        },
    }
}


def published_request_id(application: str, model: str, run_id: str, key: str) -> str:
    """The request id an item of a run is stored under (the same every time it is sent to the
    same application and model). Names cannot hold a line break, so the parts cannot run into
    each other; the run id and key may, so they come last, with their lengths."""
    name = f"{application}\n{model}\n{len(run_id)}:{run_id}\n{key}"
    return str(uuid.uuid5(PUBLISHED_NAMESPACE, name))


def _raw_results(body: Any) -> list[tuple[int, str, Any]]:
    """(item index, detector name, raw result) for each result of a body, as far as its shape
    lets them be read (validation names what is wrong with the rest)."""
    items = body.get("items") if isinstance(body, dict) else None
    found: list[tuple[int, str, Any]] = []
    for index, item in enumerate(items if isinstance(items, list) else []):
        results = item.get("results") if isinstance(item, dict) else None
        if isinstance(results, dict):
            found.extend((index, name, result) for name, result in results.items())
    return found


def _parse(body: Any) -> PublishRequest:
    try:
        check_encodable(body)
    except RequestValidationError as error:
        raise ServerError(422, str(error)) from None
    raw_results = _raw_results(body)
    # Named before the results' shapes are checked: a wrong name explains any shape.
    for index, name, _ in raw_results:
        if name not in DETECTORS:
            raise ServerError(
                422,
                f"items[{index}].results.{field_location(None, [name])}: unknown detector; "
                f"known: {', '.join(DETECTORS)}",
            )
    try:
        request = PublishRequest.model_validate(body)
    except ValidationError as error:
        first = _relevant_error(error, {(i, n): r for i, n, r in raw_results})
        where = field_location(None, first["loc"], RESULT_MODELS) or "body"
        raise ServerError(422, f"{where}: {plain_message(first['type'], first['msg'])}") from None
    for index, item in enumerate(request.items):
        for name, result in item.results.items():
            # A detector's result (or failure) comes from its inputs: with one missing no
            # detector could have given it (/v2/detect answers such an item 422).
            for field in DETECTORS[name].required_inputs:
                if problem := input_problem(item, field):
                    raise ServerError(
                        422,
                        f"items[{index}].{field}: {problem}, but results.{name} needs it (its "
                        "detector reads it)",
                    )
            if isinstance(result, DetectorResult):
                _check_result(result, name, f"items[{index}].results.{name}")
    first_at: dict[Any, int] = {}
    for index, item in enumerate(request.items):
        if item.key in first_at:
            raise ServerError(
                422,
                f"items[{index}].key: {item.key!r} is also the key of items[{first_at[item.key]}]; "
                "keys must differ within one request",
            )
        first_at[item.key] = index
    return request


def _check_result(result: DetectorResult, name: str, where: str) -> None:
    """422 unless `result` is one `name` could give: its own instructions in order, each label
    true exactly when its probability is at least 0.5, the score the fraction its labels give."""
    detector = DETECTORS[name]
    texts = [instruction.text for instruction in detector.instructions]
    if [entry.instruction for entry in result.instructions_list] != texts:
        raise ServerError(
            422,
            f"{where}.instructions_list: must be the {len(texts)} instructions of {name}, in "
            "order (GET /v1/detectors lists them)",
        )
    for k, entry in enumerate(result.instructions_list):
        if entry.label != followed(entry.follow_probability):
            raise ServerError(
                422,
                f"{where}.instructions_list[{k}].label: {str(entry.label).lower()} with "
                f"follow_probability {entry.follow_probability}; a label is true when the "
                "probability is at least 0.5",
            )
    expected = detector.score([entry.label for entry in result.instructions_list])
    if abs(result.score - expected) > 1e-4:
        raise ServerError(
            422, f"{where}.score: {result.score}, where its labels give {round(expected, 4)}"
        )


def _relevant_error(error: ValidationError, results: dict[tuple[Any, Any], Any]) -> Any:
    """The first error worth reporting. A result is a result or an error object, and pydantic
    reports both members' complaints: keep those of the member the result meant to be (an
    error object when it has an `error` key)."""
    for found in error.errors():
        loc = found["loc"]
        if len(loc) > 4 and loc[0] == "items" and loc[2] == "results" and loc[4] in RESULT_MODELS:
            raw = results.get((loc[1], loc[3]))
            meant = DetectorError if isinstance(raw, dict) and "error" in raw else DetectorResult
            if loc[4] != meant.__name__:
                continue
        return found
    return error.errors()[0]


@router.post(
    "/v1/applications/{name}/detections",
    tags=["publish"],
    summary="Store results scored elsewhere (assay run --publish)",
    responses=_RESPONSES,
    openapi_extra=_REQUEST_BODY,
)
async def publish_detections(name: str, request: Request) -> dict[str, int]:
    """Store each item's detector results under the application and `model_name`; answers
    how many items were stored now and how many had been stored before (sent again)."""
    access = require_key(request)
    try:
        check_name(name, APPLICATION_NAME_PATTERN, APPLICATION_NAME_RULE)
    except ValueError as error:
        raise ServerError(422, f"application_name: {error}") from None
    if not access.allows(name):
        raise ServerError(404, f"application_name: no application {name!r} for this API key")
    settings = request.app.state.settings
    body = await read_json_body(request, settings, "a JSON object with model_name and items")
    items = body.get("items") if isinstance(body, dict) else None
    if isinstance(items, list):
        # The same limits as /v2/detect (413 naming the field), so a text the server would not
        # score is not stored either.
        check_limits(items, settings, "items")
    parsed = _parse(body)
    stored = await asyncio.to_thread(_store, request, name, parsed)
    return {"stored": stored, "already_stored": len(parsed.items) - stored}


def _store(request: Request, application: str, body: PublishRequest) -> int:
    """Store the items not stored before, in one transaction; how many were new."""
    try:
        return _store_new(request, application, body)
    except IntegrityError:
        # Another server process stored some of these items between our look and our write
        # (the same batch sent to two replicas); the database refused the duplicates and
        # rolled back. Looking again now skips what it stored.
        return _store_new(request, application, body)


def _store_new(request: Request, application: str, body: PublishRequest) -> int:
    ids = {
        item.key: published_request_id(application, body.model_name, body.run_id, item.key)
        for item in body.items
    }
    with request.app.state.store.transaction() as session:
        seen = stored_request_ids(session, set(ids.values()))
        new: list[PublishedItem] = [item for item in body.items if ids[item.key] not in seen]
        for item in new:
            text = StoredText(item.user_query, item.generated_text, item.context_documents())
            results = {name: result.model_dump() for name, result in item.results.items()}
            add_result_rows(session, text, application, body.model_name, results, ids[item.key])
    return len(new)
