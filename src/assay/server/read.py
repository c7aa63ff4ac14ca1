"""Read endpoints: applications, their detections and metrics, the detectors, health."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, TypeVar

from fastapi import APIRouter, Depends, Query, Request
from fastapi.routing import APIRoute
from sqlalchemy.orm import Session

from assay.detectors import DETECTORS
from assay.judges.embedded.embedding_cache import shared_cache
from assay.schema import APPLICATION_NAME_PATTERN, APPLICATION_NAME_RULE, check_name
from assay.server.auth import Access, require_key
from assay.server.errors import ErrorBody, ServerError
from assay.store import jobs
from assay.store.detections import (
    application_exists,
    applications,
    detection_json,
    detections_page,
    score_series,
)


def _known_parameters_only(request: Request) -> None:
    """422 for a query parameter the endpoint does not take: a misspelt filter (`?detecter=`)
    would otherwise return everything, unfiltered, without a word."""
    route = request.scope.get("route")
    known = (
        {p.alias for p in route.dependant.query_params} if isinstance(route, APIRoute) else set()
    )
    unknown = sorted(set(request.query_params) - known)
    if unknown:
        takes = f"it takes {', '.join(sorted(known))}" if known else "it takes none"
        raise ServerError(422, f"{unknown[0]}: unknown query parameter; {takes}")
    refuse_repeats(request)


def refuse_repeats(request: Request) -> None:
    """422 for a query parameter given twice (`?model=a&model=b`): one of the values would be
    dropped without a word."""
    repeated = sorted(
        k for k in set(request.query_params) if len(request.query_params.getlist(k)) > 1
    )
    if repeated:
        raise ServerError(422, f"{repeated[0]}: given more than once; give it once")


def refuse_nul_in_url(request: Request) -> None:
    """422 for a path or query parameter holding a NUL character (on every API route; the
    dashboard calls it itself): PostgreSQL cannot compare against one (a 500 there, an empty
    answer on SQLite), and a result must not depend on the database."""
    given = [*request.path_params.items(), *request.query_params.multi_items()]
    for name, value in given:
        if isinstance(value, str) and "\x00" in value:
            raise ServerError(422, f"{name}: holds a NUL character (U+0000); remove it")


def blank_as_none(value: str | None) -> str | None:
    """A filter left blank (`?model=`) is not given, as in the dashboard's form."""
    return value.strip() or None if value is not None else None


def time_range(since: str | None, until: str | None) -> tuple[datetime | None, datetime | None]:
    """The `since` and `until` filters as naive UTC; 422 when since comes after until (nothing
    could match: the caller has them the wrong way round)."""
    start, end = parse_moment(since, "since"), parse_moment(until, "until")
    if start is not None and end is not None and start > end:
        raise ServerError(422, f"since: {since!r} is after until ({until!r})")
    return start, end


router = APIRouter(dependencies=[Depends(_known_parameters_only)])
T = TypeVar("T")

_AUTH: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody, "description": "Missing or invalid API key."}
}
_APP: dict[int | str, dict[str, Any]] = {
    **_AUTH,
    404: {"model": ErrorBody, "description": "No detections published for this application."},
    422: {"model": ErrorBody, "description": "A query parameter is invalid."},
}

# Read as text and parsed by `parse_moment`, as the dashboard's filters are: FastAPI's datetime
# would take a bare number as a Unix timestamp ("since=2027" meant 1970).
_ISO = {"format": "date-time"}
Since = Annotated[
    str | None, Query(description="Only detections at or after (ISO 8601).", json_schema_extra=_ISO)
]
Until = Annotated[
    str | None, Query(description="Only detections before (ISO 8601).", json_schema_extra=_ISO)
]
DetectorName = Annotated[str | None, Query(description="Only this detector.")]
ModelName = Annotated[str | None, Query(description="Only this model.")]


#: Largest `offset` accepted: far beyond any real table, well inside SQL's 64-bit integers.
MAX_OFFSET = 1_000_000_000


def parse_moment(text: str | None, name: str) -> datetime | None:
    """A filter's date and time as naive UTC (None when not given); 422 naming the parameter
    for text that is not ISO 8601 (a bare year or Unix timestamp is not)."""
    if text is None or not text.strip():
        return None
    try:
        parsed = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ServerError(422, f"{name}: {text!r} is not a date and time (ISO 8601)") from None
    return naive_utc(parsed, name)


def naive_utc(moment: datetime | None, parameter: str) -> datetime | None:
    # Stored timestamps are naive UTC; a zoned filter is converted, a naive one taken as UTC.
    if moment is None or moment.tzinfo is None:
        return moment
    try:
        return moment.astimezone(UTC).replace(tzinfo=None)
    except OverflowError:
        raise ServerError(
            422, f"{parameter}: {moment.isoformat()} is outside years 1-9999 once converted to UTC"
        ) from None


async def read_application(
    request: Request, access: Access, name: str, reader: Callable[[Session], T]
) -> T:
    """Run `reader` on a session in a worker thread; 422 if `name` breaks the naming rule, 404
    if it has no detections or is outside the key's applications (the same answer, so a scoped
    key learns nothing about other applications)."""

    try:
        # A name no application can have is named as such (422, as when publishing to it).
        check_name(name, APPLICATION_NAME_PATTERN, APPLICATION_NAME_RULE)
    except ValueError as error:
        raise ServerError(422, f"application_name: {error}") from None

    def run() -> T:
        with request.app.state.store.reading() as session:
            if not access.allows(name) or not application_exists(session, name):
                shown = name if len(name) <= 100 else name[:100] + "…"
                raise ServerError(404, f"application {shown!r} has no published detections")
            return reader(session)

    return await asyncio.to_thread(run)


def _check_detector(detector: str | None) -> None:
    if detector is not None and detector not in DETECTORS:
        raise ServerError(
            422, f"detector: unknown detector {detector!r}; known: {', '.join(DETECTORS)}"
        )


@router.get("/v1/applications", tags=["read"], responses=_AUTH)
async def list_applications(request: Request) -> list[dict[str, Any]]:
    """Applications with published detections: models, items (scored request items),
    detections (one per detector of an item), mean score per detector."""
    access = require_key(request)

    def query() -> list[dict[str, Any]]:
        with request.app.state.store.reading() as session:
            return [
                {
                    "name": app.name,
                    "models": app.models,
                    "items": app.items,
                    "detections": app.detections,
                    "last_detection_at": app.last_detection_at.isoformat() + "Z"
                    if app.last_detection_at
                    else None,
                    "mean_scores": app.mean_scores,
                }
                for app in applications(session, access.applications)
            ]

    return await asyncio.to_thread(query)


@router.get("/v1/applications/{name}/detections", tags=["read"], responses=_APP)
async def list_detections(
    name: str,
    request: Request,
    detector: DetectorName = None,
    model: ModelName = None,
    since: Since = None,
    until: Until = None,
    limit: Annotated[int, Query(ge=1, le=500, description="Page size.")] = 50,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET, description="Detections to skip.")] = 0,
) -> dict[str, Any]:
    """One page of an application's detections, newest first."""
    access = require_key(request)
    detector, model = blank_as_none(detector), blank_as_none(model)
    _check_detector(detector)
    start, end = time_range(since, until)

    def query(session: Session) -> dict[str, Any]:
        total, page = detections_page(
            session,
            name,
            detector=detector,
            since=start,
            until=end,
            limit=limit,
            offset=offset,
            model=model,
        )
        return {
            "application": name,
            "total": total,
            "limit": limit,
            "offset": offset,
            "items": [detection_json(d) for d in page],
        }

    return await read_application(request, access, name, query)


@router.get("/v1/applications/{name}/metrics", tags=["read"], responses=_APP)
async def application_metrics(
    name: str,
    request: Request,
    bucket: Annotated[
        Literal["minute", "hour", "day"], Query(description="Bucket width.")
    ] = "hour",
    detector: DetectorName = None,
    model: ModelName = None,
    since: Since = None,
    until: Until = None,
) -> dict[str, Any]:
    """Per detector, the mean score in each time bucket (UTC) that has detections."""
    access = require_key(request)
    detector, model = blank_as_none(detector), blank_as_none(model)
    _check_detector(detector)
    start, end = time_range(since, until)

    def query(session: Session) -> dict[str, Any]:
        series = score_series(
            session,
            name,
            bucket,
            detector=detector,
            since=start,
            until=end,
            model=model,
        )
        return {"application": name, "bucket": bucket, "detectors": series}

    return await read_application(request, access, name, query)


@router.get("/v1/detectors", tags=["read"], responses=_AUTH)
async def list_detectors(request: Request) -> list[dict[str, Any]]:
    """The detectors: inputs and instruction texts."""
    require_key(request)
    return [
        {
            "name": d.name,
            "description": d.description,
            "required_inputs": list(d.required_inputs),
            "optional_inputs": list(d.optional_inputs),
            "instructions": [i.text for i in d.instructions],
        }
        for d in DETECTORS.values()
    ]


# HEAD too, for load balancers that probe with it (outside the schema: one operation there).
@router.head("/healthz", include_in_schema=False)
@router.get(
    "/healthz",
    tags=["read"],
    responses={
        503: {"model": ErrorBody, "description": "The database or this job worker is down."}
    },
)
async def health(request: Request) -> dict[str, Any]:
    """Liveness and readiness: the database answers and this process's job worker runs; job
    counts by state; the jobs this process holds; its embedding cache (hits, misses, hit rate,
    entries, bound). No key needed."""
    store = request.app.state.store
    worker = request.app.state.worker
    if not worker.alive:
        raise ServerError(503, "the job worker stopped; see the server log")
    if (failing := worker.claims_failing) is not None:
        raise ServerError(503, f"the job worker cannot claim jobs: {failing}; see the server log")
    try:
        counts = await asyncio.to_thread(jobs.counts, store)
    except Exception as error:
        raise ServerError(503, f"database unavailable: {type(error).__name__}") from None
    return {
        "status": "ok",
        "jobs": counts,
        "worker": {"running": worker.running},
        "embedding_cache": shared_cache().stats().to_dict(),
    }
