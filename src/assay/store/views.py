"""The queries behind an application's dashboard page, all under one filter.

The dashboard counts *items* (one scored request item, or one published row: the detections
that share a `request_id`), not detections, which are one per detector. A filter narrows the
detections by model, detector, score range and time; an item is shown when any of its
detections matches, with all its detectors.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session, selectinload

from assay.store.models import Detection, InstructionOutcome

#: Bucket widths a trend may use, narrowest first; the narrowest that gives at most
#: `MAX_BUCKETS` buckets over the data's span is chosen.
BUCKET_WIDTHS = tuple(
    timedelta(seconds=s)
    for s in (1, 5, 15, 60, 300, 900, 3600, 3 * 3600, 6 * 3600, 86400, 7 * 86400, 30 * 86400)
)
MAX_BUCKETS = 48


@dataclass(frozen=True)
class DetectionFilter:
    """Which detections a dashboard view covers.

    application: the application (always set).
    model / detector: only these (None: all).
    min_score / max_score: only scores in this closed range (None: no bound); a bound leaves
        failed detections (no score) out.
    since / until: only detections stored at or after `since` and before `until` (naive UTC).
    """

    application: str
    model: str | None = None
    detector: str | None = None
    min_score: float | None = None
    max_score: float | None = None
    since: datetime | None = None
    until: datetime | None = None

    def apply(self, query: Any) -> Any:
        """`query` (over `Detection`) narrowed to this filter."""
        query = query.where(Detection.application_name == self.application)
        if self.model is not None:
            query = query.where(Detection.model_name == self.model)
        if self.detector is not None:
            query = query.where(Detection.detector == self.detector)
        if self.min_score is not None:
            query = query.where(Detection.score >= self.min_score)
        if self.max_score is not None:
            query = query.where(Detection.score <= self.max_score)
        if self.since is not None:
            query = query.where(Detection.created_at >= self.since)
        if self.until is not None:
            query = query.where(Detection.created_at < self.until)
        return query


@dataclass
class Item:
    """One scored item: when, under which model, its text and one detection per detector."""

    request_id: str
    created_at: datetime
    model_name: str
    user_query: str | None
    generated_text: str
    context: list[str]
    detections: list[Detection] = field(default_factory=list)


def item_count(session: Session, view: DetectionFilter) -> int:
    """How many items have a detection matching the filter."""
    query = view.apply(select(func.count(func.distinct(Detection.request_id))))
    return int(session.execute(query).scalar_one())


def items_page(session: Session, view: DetectionFilter, limit: int, offset: int) -> list[Item]:
    """One page of matching items, newest first, each with all its detections by name."""
    newest = func.max(Detection.created_at).label("newest")
    page = session.execute(
        view.apply(select(Detection.request_id, newest))
        .group_by(Detection.request_id)
        .order_by(newest.desc(), Detection.request_id.desc())
        .limit(limit)
        .offset(offset)
    ).all()
    ids = [request_id for request_id, _ in page]
    if not ids:
        return []
    detections = (
        session.execute(
            select(Detection)
            .where(Detection.request_id.in_(ids), Detection.application_name == view.application)
            .options(selectinload(Detection.instructions))
            .order_by(Detection.detector)
        )
        .scalars()
        .all()
    )
    items: dict[str, Item] = {}
    for request_id, when in page:
        items[request_id] = Item(request_id, when, "", None, "", [])
    for detection in detections:
        item = items[detection.request_id]
        item.model_name = detection.model_name
        item.user_query = detection.user_query
        item.generated_text = detection.generated_text
        item.context = list(detection.context or [])
        item.detections.append(detection)
    return list(items.values())


def span(session: Session, view: DetectionFilter) -> tuple[datetime, datetime] | None:
    """When the first and last matching detections were stored; None when there are none."""
    first, last = session.execute(
        view.apply(select(func.min(Detection.created_at), func.max(Detection.created_at)))
    ).one()
    return None if first is None else (first, last)


def bucket_width(first: datetime, last: datetime) -> timedelta:
    """The narrowest width in `BUCKET_WIDTHS` giving at most `MAX_BUCKETS` buckets."""
    seconds = (last - first).total_seconds()
    for width in BUCKET_WIDTHS:
        if seconds / width.total_seconds() < MAX_BUCKETS:
            return width
    return BUCKET_WIDTHS[-1]


def bucket_start(moment: datetime, width: timedelta) -> datetime:
    """The start of `moment`'s bucket: whole multiples of `width` since the epoch."""
    seconds = int(width.total_seconds())
    epoch = datetime(1970, 1, 1)
    return epoch + timedelta(seconds=(int((moment - epoch).total_seconds()) // seconds) * seconds)


@dataclass(frozen=True)
class Bucket:
    """One time bucket of a detector's trend."""

    start: datetime
    mean: float
    count: int


def trends(session: Session, view: DetectionFilter, width: timedelta) -> dict[str, list[Bucket]]:
    """Per detector, the mean score and count in each bucket that has scores (in Python, so
    bucketing is the same on every database)."""
    rows = session.execute(
        view.apply(select(Detection.detector, Detection.created_at, Detection.score)).where(
            Detection.score.is_not(None)
        )
    ).all()
    sums: dict[str, dict[datetime, list[float]]] = defaultdict(lambda: defaultdict(list))
    for name, created, score in rows:
        sums[name][bucket_start(created, width)].append(float(score))
    return {
        name: [
            Bucket(start, sum(scores) / len(scores), len(scores))
            for start, scores in sorted(buckets.items())
        ]
        for name, buckets in sorted(sums.items())
    }


def scores(session: Session, view: DetectionFilter) -> dict[str, list[float]]:
    """Every matching score, per detector (for the distributions)."""
    rows = session.execute(
        view.apply(select(Detection.detector, Detection.score)).where(Detection.score.is_not(None))
    ).all()
    found: dict[str, list[float]] = defaultdict(list)
    for name, score in rows:
        found[name].append(float(score))
    return dict(sorted(found.items()))


@dataclass(frozen=True)
class InstructionRate:
    """How often one instruction was not followed among matching detections."""

    detector: str
    instruction: str
    failed: int
    total: int

    @property
    def failure_rate(self) -> float:
        return self.failed / self.total if self.total else 0.0


def instruction_failures(session: Session, view: DetectionFilter) -> list[InstructionRate]:
    """Each instruction's failures among matching detections, the most failed first."""
    failed = func.sum(case((InstructionOutcome.label.is_(False), 1), else_=0))
    query = view.apply(
        select(InstructionOutcome.detector, InstructionOutcome.instruction, failed, func.count())
        .join(Detection, InstructionOutcome.detection_id == Detection.id)
        .group_by(InstructionOutcome.detector, InstructionOutcome.instruction)
    )
    rates = [InstructionRate(d, i, int(f or 0), int(t)) for d, i, f, t in session.execute(query)]
    return sorted(rates, key=lambda r: (-r.failure_rate, -r.failed, r.detector, r.instruction))


@dataclass
class ModelComparison:
    """Mean score per detector and pass rate per instruction, for each model.

    models: the models compared, by name.
    detectors: detector -> model -> (mean score, scored detections).
    instructions: (detector, instruction) -> model -> (share followed, verdicts).
    """

    models: list[str]
    detectors: dict[str, dict[str, tuple[float, int]]]
    instructions: dict[tuple[str, str], dict[str, tuple[float, int]]]


def compare_models(session: Session, view: DetectionFilter) -> ModelComparison:
    """Every model side by side under the filter (its model choice left out, so that all
    models are compared)."""
    everyone = DetectionFilter(
        view.application,
        None,
        view.detector,
        view.min_score,
        view.max_score,
        view.since,
        view.until,
    )
    means = session.execute(
        everyone.apply(
            select(
                Detection.detector, Detection.model_name, func.avg(Detection.score), func.count()
            )
        )
        .where(Detection.score.is_not(None))
        .group_by(Detection.detector, Detection.model_name)
    ).all()
    followed = func.sum(case((InstructionOutcome.label.is_(True), 1), else_=0))
    rates = session.execute(
        everyone.apply(
            select(
                InstructionOutcome.detector,
                InstructionOutcome.instruction,
                Detection.model_name,
                followed,
                func.count(),
            )
            .join(Detection, InstructionOutcome.detection_id == Detection.id)
            .group_by(
                InstructionOutcome.detector, InstructionOutcome.instruction, Detection.model_name
            )
        )
    ).all()
    detectors: dict[str, dict[str, tuple[float, int]]] = defaultdict(dict)
    models: set[str] = set()
    for detector, model, mean, count in means:
        detectors[detector][model] = (float(mean), int(count))
        models.add(model)
    instructions: dict[tuple[str, str], dict[str, tuple[float, int]]] = defaultdict(dict)
    for detector, instruction, model, yes, total in rates:
        instructions[(detector, instruction)][model] = (int(yes or 0) / int(total), int(total))
    return ModelComparison(
        sorted(models),
        dict(sorted(detectors.items())),
        dict(sorted(instructions.items())),
    )
