"""`POST /v2/detect` (aliases `/v1/detect`, `/v3/detect`) and `GET /v1/jobs/{id}`."""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

from fastapi import APIRouter, Request
from sqlalchemy.orm import Session

from assay.detectors.evaluate import detect_items, failed_results, parse_items
from assay.schema import (
    INPUT_FAILURES,
    DetectorFailed,
    DetectRequestItem,
    JudgeFailure,
    RequestValidationError,
)
from assay.server.auth import require_key
from assay.server.body import check_limits, read_json_body
from assay.server.errors import ErrorBody, ServerError
from assay.server.settings import ServerSettings
from assay.store import jobs
from assay.store.detections import add_detections

logger = logging.getLogger(__name__)
router = APIRouter()

#: The body AIMon's service answers an accepted async item with.
ACCEPTED_MESSAGE = "Data successfully sent to Assay."

_ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": description}
    for status, description in {
        400: "Body is not UTF-8 JSON, is empty, is nested too deeply, repeats a key, or holds "
        "NaN/Infinity or a number beyond JSON's exact range.",
        401: "Missing or invalid API key.",
        404: "An item publishes to an application the API key may not use.",
        408: "The body did not arrive within the body timeout.",
        413: "Body, batch or a text is larger than the configured limits.",
        415: "Content-Type is not application/json, or names a charset other than utf-8.",
        422: "An item is invalid: the message names the item index and field.",
        429: "Too many requests in flight; retry after `retry-after` seconds.",
        503: "A detector failed and the item's must_compute is all_or_none (a failure of the "
        "item's own input, such as input_too_long or content_filtered, is a 422 instead: "
        "sending it again would fail again).",
    }.items()
}
_REQUEST_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "type": "array",
                    "items": {"$ref": "#/components/schemas/DetectRequestItem"},
                }
            }
        },
    }
}
_DETECT_RESPONSE: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "One object per request item, in order: detector name -> result (or "
        "an error object under ignore_failures); for an async item, the acceptance message "
        "with its `job_id`.",
        "content": {
            "application/json": {
                "schema": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "additionalProperties": {
                            "anyOf": [
                                {"$ref": "#/components/schemas/DetectorResult"},
                                {"$ref": "#/components/schemas/DetectorError"},
                                {"type": "string"},
                                {"type": "integer"},
                            ]
                        },
                    },
                }
            }
        },
    }
}


class _InFlight:
    """Counts detect requests being handled; the event loop is single-threaded, so no lock."""

    def __init__(self, request: Request) -> None:
        self.state = request.app.state
        self.limit = request.app.state.settings.max_in_flight

    def __enter__(self) -> None:
        if self.state.in_flight >= self.limit:
            raise ServerError(
                429,
                f"server is busy ({self.limit} requests in flight); retry shortly",
                {"retry-after": "1"},
            )
        self.state.in_flight += 1

    def __exit__(self, *_: object) -> None:
        self.state.in_flight -= 1


async def _detect(request: Request) -> list[dict[str, Any]]:
    access = require_key(request)
    settings = request.app.state.settings
    # The body is read before a slot is taken: a client that sends its body slowly (or never)
    # holds only its own connection, not one of the slots every scoring request needs.
    body = await read_json_body(request, settings)
    check_limits(body, settings)
    try:
        items = parse_items(body)
    except RequestValidationError as error:
        raise ServerError(422, f"{error.field}: {error.message}") from None
    for index, item in enumerate(items):
        if (item.publish or item.async_mode) and not access.allows(item.application_name):
            raise ServerError(
                404,
                f"[{index}].application_name: no application {item.application_name!r} "
                "for this API key",
            )
    with _InFlight(request):
        now = [index for index, item in enumerate(items) if not item.async_mode]
        try:
            computed = await judge_in_time([items[i] for i in now], settings) if now else []
        except DetectorFailed as error:
            # Named by its place in the request (async items were not in the judged list).
            place = now[error.item] if error.item is not None else None
            failed = DetectorFailed(error.detector, error.failure, place)
            # `failure` lets a client raise what the in-process path raises (DetectorFailed).
            raise ServerError(
                422 if error.failure.kind in INPUT_FAILURES else 503,
                f"{failed}; nothing was stored (must_compute=all_or_none)",
                fields={
                    "failure": {
                        "item": place,
                        "detector": error.detector,
                        "kind": error.failure.kind,
                        "message": error.failure.message,
                    }
                },
            ) from None
        responses: list[dict[str, Any]] = [{} for _ in items]
        for index, result in zip(now, computed, strict=True):
            responses[index] = result
        queued: list[tuple[str, DetectRequestItem]] = []
        for index, item in enumerate(items):
            if item.async_mode:
                job_id = str(uuid.uuid4())
                queued.append((job_id, item))
                responses[index] = {"message": ACCEPTED_MESSAGE, "status": 200, "job_id": job_id}
        published = [
            (items[index], computed[n]) for n, index in enumerate(now) if items[index].publish
        ]
        if (published or queued) and await request.is_disconnected():
            # The client gave up waiting (a timeout shorter than the judging: AIMon's SDK waits
            # 60 s) and will send the request again: stored now, it would be stored twice.
            logger.warning("client left before its results were stored; nothing was stored")
            return responses
        if published or queued:
            await asyncio.to_thread(_store, request, published, queued)
            if queued:
                request.app.state.worker.wake()
        return responses


async def judge_in_time(
    items: list[DetectRequestItem], settings: ServerSettings
) -> list[dict[str, Any]]:
    """`detect_items`, bounded by `settings.judge_timeout_seconds`: past it, every detector
    of the items fails with kind "timeout" (DetectorFailed under all_or_none)."""
    try:
        async with asyncio.timeout(settings.judge_timeout_seconds):
            return await detect_items(items)
    except TimeoutError:
        seconds = settings.judge_timeout_seconds
        return failed_results(items, JudgeFailure("timeout", f"not judged within {seconds:g} s"))


def _store(
    request: Request,
    published: list[tuple[DetectRequestItem, dict[str, Any]]],
    queued: list[tuple[str, DetectRequestItem]],
) -> None:
    """Everything the request stores, in one transaction: all of it or none of it."""
    session: Session
    with request.app.state.store.transaction() as session:
        for item, results in published:
            add_detections(session, item, results, request_id=str(uuid.uuid4()))
        for job_id, item in queued:
            request_json = item.model_dump(mode="json", exclude_none=True)
            request_json["publish"] = True  # async implies publish
            jobs.enqueue(
                session, job_id, request_json, item.application_name or "", item.model_name or ""
            )


for _path in ("/v2/detect", "/v1/detect", "/v3/detect"):
    router.add_api_route(
        _path,
        _detect,
        methods=["POST"],
        tags=["detect"],
        summary="Score request items with the configured detectors",
        responses={**_DETECT_RESPONSE, **_ERRORS},
        openapi_extra=_REQUEST_BODY,
        response_model=None,
        name=f"detect_{_path.split('/')[1]}",
    )


@router.get(
    "/v1/jobs/{job_id}",
    tags=["jobs"],
    summary="State and results of an async job",
    responses={401: _ERRORS[401], 404: {"model": ErrorBody, "description": "No such job."}},
)
async def job_status(job_id: str, request: Request) -> dict[str, Any]:
    access = require_key(request)
    job = await asyncio.to_thread(jobs.get, request.app.state.store, job_id)
    if job is None or not access.allows(job.application_name):
        # Another application's job is "not found" too: its existence is not ours to confirm.
        raise ServerError(404, f"job {job_id[:64]!r} not found")
    return {
        "id": job.id,
        "state": job.state,
        "attempts": job.attempts,
        "application_name": job.application_name,
        "model_name": job.model_name,
        "created_at": job.created_at.isoformat() + "Z",
        "finished_at": job.finished_at.isoformat() + "Z" if job.finished_at else None,
        "result": job.result,
        "error": job.error,
    }
