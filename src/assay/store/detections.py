"""Writing published detections and the read queries behind the API (the dashboard's own
queries are in `views.py`)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, selectinload

from assay.schema import DetectRequestItem
from assay.store.models import Detection, InstructionOutcome, utcnow


def add_detections(
    session: Session,
    item: DetectRequestItem,
    results: Mapping[str, Any],
    request_id: str,
    job_id: str | None = None,
) -> None:
    """Add one row per detector of `item` (and one per instruction verdict) to `session`.

    results: detector name -> the wire result, or the error object for a failed detector.
    """
    add_result_rows(
        session,
        StoredText(item.user_query, item.generated_text, item.context_documents()),
        item.application_name or "",
        item.model_name or "",
        results,
        request_id,
        job_id,
    )


@dataclass(frozen=True)
class StoredText:
    """The text a detection was made on."""

    user_query: str | None
    generated_text: str
    context: list[str]


def add_result_rows(
    session: Session,
    text: StoredText,
    application: str,
    model: str,
    results: Mapping[str, Any],
    request_id: str,
    job_id: str | None = None,
) -> None:
    """Add one detection per detector (and one row per instruction verdict) to `session`."""
    now = utcnow()
    for detector, result in results.items():
        failed = bool(result.get("error"))
        detection = Detection(
            request_id=request_id,
            application_name=application,
            model_name=model,
            detector=detector,
            created_at=now,
            score=None if failed else float(result["score"]),
            error=str(result.get("message", "failed")) if failed else None,
            user_query=text.user_query,
            generated_text=text.generated_text,
            context=text.context,
            result=dict(result),
            job_id=job_id,
        )
        for entry in [] if failed else result["instructions_list"]:
            detection.instructions.append(
                InstructionOutcome(
                    application_name=application,
                    detector=detector,
                    instruction=entry["instruction"],
                    label=bool(entry["label"]),
                    follow_probability=float(entry["follow_probability"]),
                )
            )
        session.add(detection)


@dataclass
class ApplicationSummary:
    """An application with its models, item and detection counts and last activity.

    items: scored items (one request item or published row, whatever its detectors);
    detections: one per detector of each item.
    """

    name: str
    models: list[str] = field(default_factory=list)
    items: int = 0
    detections: int = 0
    last_detection_at: datetime | None = None
    mean_scores: dict[str, float] = field(default_factory=dict)


def applications(session: Session, only: Collection[str] | None = None) -> list[ApplicationSummary]:
    """Every application that has published detections, by name.

    only: just these applications (those an API key may see); None: all of them.
    """
    summaries: dict[str, ApplicationSummary] = {}
    counts = select(
        Detection.application_name,
        Detection.model_name,
        func.count(),
        func.count(func.distinct(Detection.request_id)),
        func.max(Detection.created_at),
    )
    means = select(Detection.application_name, Detection.detector, func.avg(Detection.score))
    if only is not None:
        counts = counts.where(Detection.application_name.in_(sorted(only)))
        means = means.where(Detection.application_name.in_(sorted(only)))
    rows = session.execute(counts.group_by(Detection.application_name, Detection.model_name)).all()
    for name, model, count, items, last in rows:
        summary = summaries.setdefault(name, ApplicationSummary(name))
        summary.models.append(model)
        summary.detections += int(count)
        summary.items += int(items)
        if summary.last_detection_at is None or last > summary.last_detection_at:
            summary.last_detection_at = last
    averages = session.execute(
        means.where(Detection.score.is_not(None)).group_by(
            Detection.application_name, Detection.detector
        )
    ).all()
    for name, detector, mean in averages:
        summaries[name].mean_scores[detector] = round(float(mean), 4)
    for summary in summaries.values():
        summary.models.sort()
    return [summaries[name] for name in sorted(summaries)]


def stored_request_ids(session: Session, request_ids: Collection[str]) -> set[str]:
    """Which of `request_ids` already have detections."""
    if not request_ids:
        return set()
    rows = session.execute(
        select(Detection.request_id).where(Detection.request_id.in_(sorted(request_ids))).distinct()
    ).scalars()
    return set(rows)


def application_exists(session: Session, name: str) -> bool:
    found = session.execute(
        select(Detection.id).where(Detection.application_name == name).limit(1)
    ).first()
    return found is not None


def model_names(session: Session, application: str) -> list[str]:
    """The models an application has published detections for, by name."""
    rows = session.execute(
        select(Detection.model_name)
        .where(Detection.application_name == application)
        .distinct()
        .order_by(Detection.model_name)
    ).scalars()
    return list(rows)


def _filtered(
    query: Any,
    application: str,
    detector: str | None,
    since: datetime | None,
    until: datetime | None,
    model: str | None = None,
) -> Any:
    query = query.where(Detection.application_name == application)
    if model is not None:
        query = query.where(Detection.model_name == model)
    if detector is not None:
        query = query.where(Detection.detector == detector)
    if since is not None:
        query = query.where(Detection.created_at >= since)
    if until is not None:
        query = query.where(Detection.created_at < until)
    return query


def detections_page(
    session: Session,
    application: str,
    *,
    detector: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    limit: int = 50,
    offset: int = 0,
    model: str | None = None,
) -> tuple[int, list[Detection]]:
    """The total matching and one page of an application's detections, newest first."""
    total = session.execute(
        _filtered(select(func.count(Detection.id)), application, detector, since, until, model)
    ).scalar_one()
    page = (
        session.execute(
            _filtered(select(Detection), application, detector, since, until, model)
            .options(selectinload(Detection.instructions))
            .order_by(Detection.created_at.desc(), Detection.id.desc())
            .limit(limit)
            .offset(offset)
        )
        .scalars()
        .all()
    )
    return int(total), list(page)


def _bucket_start(moment: datetime, bucket: str) -> datetime:
    if bucket == "minute":
        return moment.replace(second=0, microsecond=0)
    if bucket == "hour":
        return moment.replace(minute=0, second=0, microsecond=0)
    return moment.replace(hour=0, minute=0, second=0, microsecond=0)


def score_series(
    session: Session,
    application: str,
    bucket: str,
    *,
    detector: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    model: str | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """Per detector, the mean score and count in each time bucket that has detections.

    Bucketing happens here rather than in SQL so it is the same on every database.
    """
    rows = session.execute(
        _filtered(
            select(Detection.detector, Detection.created_at, Detection.score),
            application,
            detector,
            since,
            until,
            model,
        ).where(Detection.score.is_not(None))
    ).all()
    sums: dict[str, dict[datetime, list[float]]] = defaultdict(lambda: defaultdict(list))
    for name, created, score in rows:
        sums[name][_bucket_start(created, bucket)].append(float(score))
    return {
        name: [
            {
                "bucket_start": start.isoformat() + "Z",
                "mean_score": round(sum(scores) / len(scores), 4),
                "count": len(scores),
            }
            for start, scores in sorted(by_bucket.items())
        ]
        for name, by_bucket in sorted(sums.items())
    }


def detection_json(detection: Detection) -> dict[str, Any]:
    """A stored detection as the API returns it."""
    return {
        "id": detection.id,
        "request_id": detection.request_id,
        "application_name": detection.application_name,
        "model_name": detection.model_name,
        "detector": detection.detector,
        "created_at": detection.created_at.isoformat() + "Z",
        "score": detection.score,
        "error": detection.error,
        "user_query": detection.user_query,
        "generated_text": detection.generated_text,
        "context": detection.context,
        "result": detection.result,
        "job_id": detection.job_id,
    }
