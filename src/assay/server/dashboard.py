"""The web dashboard: server-rendered pages at `/` and `/applications/{name}`."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment, PackageLoader, select_autoescape
from sqlalchemy.orm import Session

from assay.server.auth import require_key
from assay.server.charts import TrendPoint, failure_bar, histogram, trend
from assay.server.read import read_application
from assay.store.detections import (
    applications,
    detections_page,
    instruction_failures,
    model_names,
    score_series,
    scores_by_detector,
    time_span,
)

router = APIRouter(include_in_schema=False)

_templates: Environment | None = None
RECENT_DETECTIONS = 20


def _environment() -> Environment:
    # Built on first use, not at import: no work at import time.
    global _templates
    if _templates is None:
        _templates = Environment(
            loader=PackageLoader("assay.server", "templates"),
            autoescape=select_autoescape(["html"]),
        )
    return _templates


def _render(template: str, **context: Any) -> HTMLResponse:
    return HTMLResponse(_environment().get_template(template).render(**context))


@router.get("/", response_class=HTMLResponse)
async def overview(request: Request) -> HTMLResponse:
    access = require_key(request, browser=True)

    def query() -> list[Any]:
        with request.app.state.store.reading() as session:
            return applications(session, access.applications)

    return _render("index.html", applications=await asyncio.to_thread(query))


def _bucket_for(span: timedelta) -> str:
    """A bucket width giving a readable number of points for the data's time span."""
    if span <= timedelta(hours=3):
        return "minute"
    if span <= timedelta(days=4):
        return "hour"
    return "day"


def _short(moment: str, bucket: str) -> str:
    """A bucket's ISO start as a short label: the time for minutes and hours, else the date."""
    date, _, time = moment.rstrip("Z").partition("T")
    return f"{date[5:]} {time[:5]}" if bucket != "day" else date


@router.get("/applications/{name}", response_class=HTMLResponse)
async def application_page(name: str, request: Request) -> HTMLResponse:
    access = require_key(request, browser=True)

    def query(session: Session) -> dict[str, Any]:
        total, recent = detections_page(session, name, limit=RECENT_DETECTIONS)
        first, last = time_span(session, name)
        bucket = _bucket_for(last - first)
        series = score_series(session, name, bucket)
        scores = scores_by_detector(session, name)
        failures = instruction_failures(session, name)
        models = model_names(session, name)
        charts = [
            {
                "detector": detector,
                "count": len(values),
                "mean": sum(values) / len(values),
                "histogram": histogram(f"{detector} score distribution", values),
                "trend": trend(
                    f"{detector} mean score per {bucket}",
                    [
                        TrendPoint(
                            _short(p["bucket_start"], bucket),
                            p["mean_score"],
                            p["count"],
                            datetime.fromisoformat(p["bucket_start"].rstrip("Z")).timestamp(),
                        )
                        for p in series.get(detector, [])
                    ],
                ),
            }
            for detector, values in scores.items()
        ]
        return {
            "name": name,
            "total": total,
            "models": models,
            "bucket": bucket,
            "charts": charts,
            "failures": [(f, failure_bar(f.failure_rate)) for f in failures],
            "recent": recent,
        }

    page = await read_application(request, access, name, query)
    return _render("application.html", **page)
