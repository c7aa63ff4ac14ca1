"""The web dashboard: server-rendered pages at `/` and `/applications/{name}`.

An application's page takes its filters from the query string (a plain GET form, no
JavaScript): `model`, `detector`, `min_score`, `max_score`, `since`, `until` (ISO 8601, UTC)
and `page`. Counts are of items (a scored request item or published row), each listed once
with all its detectors; charts and the model comparison cover the filtered detections.
"""

from __future__ import annotations

import asyncio
import math
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment, PackageLoader, select_autoescape
from sqlalchemy.orm import Session

from assay.detectors import DETECTORS
from assay.server.auth import Access, require_key
from assay.server.charts import TrendPoint, failure_bar, histogram, trend
from assay.server.errors import ServerError
from assay.server.read import read_application, refuse_nul_in_url, refuse_repeats, time_range
from assay.store.detections import applications, model_names
from assay.store.views import (
    DetectionFilter,
    ModelComparison,
    bucket_width,
    compare_models,
    instruction_failures,
    item_count,
    items_page,
    scores,
    span,
    trends,
)

router = APIRouter(include_in_schema=False)

_templates: Environment | None = None
#: Items per page of the item list.
PAGE_SIZE = 25
_FILTER_KEYS = ("model", "detector", "min_score", "max_score", "since", "until")


def _environment() -> Environment:
    # Built on first use, not at import: no work at import time.
    global _templates
    if _templates is None:
        _templates = Environment(
            loader=PackageLoader("assay.server", "templates"),
            autoescape=select_autoescape(["html"]),
        )
    return _templates


def _render(template: str, status: int = 200, **context: Any) -> HTMLResponse:
    return HTMLResponse(_environment().get_template(template).render(**context), status)


def _browser_access(request: Request) -> Access | HTMLResponse:
    """What the browser's key may see, or a page that says how to sign in: a cancelled or
    wrong password prompt showed the API's JSON, which asks for a header no browser sends."""
    try:
        return require_key(request, browser=True)
    except ServerError as error:  # a 401, the only error it raises
        page = _render(
            "page_error.html",
            error.status,
            name="Assay",
            heading="sign in",
            message="This dashboard needs one of the server's API keys: sign in with any user "
            f"name and the key as the password ({error.message.split(':')[0]}).",
            link=str(request.url.path),
            link_text="Sign in again",
        )
        page.headers.update(error.headers)
        return page


@router.get("/", response_class=HTMLResponse)
async def overview(request: Request) -> HTMLResponse:
    access = _browser_access(request)
    if isinstance(access, HTMLResponse):
        return access

    def query() -> list[Any]:
        with request.app.state.store.reading() as session:
            return applications(session, access.applications)

    return _render("index.html", applications=await asyncio.to_thread(query))


def _score_bound(text: str, name: str) -> float | None:
    # ASCII only, as the API's numbers: Python reads "١" (Arabic-Indic one) as 1, which the
    # form's number field then cannot show, and a resubmitted form lost the filter.
    try:
        value = float(text.encode("ascii"))
    except (UnicodeEncodeError, ValueError):
        raise ServerError(422, f"{name}: {text!r} is not a number") from None
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise ServerError(422, f"{name}: {text!r} is outside 0 to 1")
    return value


def parse_filter(name: str, params: dict[str, str]) -> tuple[DetectionFilter, int]:
    """The filter and 1-based page number from a query string (blank fields are unset, as
    an empty form sends them); 422 naming the field for a value that cannot be read."""
    unknown = sorted(set(params) - {*_FILTER_KEYS, "page"})
    if unknown:  # a misspelt filter would otherwise show everything, unfiltered
        raise ServerError(
            422, f"{unknown[0]}: unknown filter; the page takes {', '.join(_FILTER_KEYS)}, page"
        )
    given = {key: value.strip() for key, value in params.items() if value and value.strip()}
    detector = given.get("detector")
    if detector is not None and detector not in DETECTORS:
        raise ServerError(422, f"detector: unknown detector {detector!r}")
    try:
        page = int(given.get("page", "1").encode("ascii"))
    except (UnicodeEncodeError, ValueError):
        raise ServerError(422, f"page: {given['page']!r} is not a whole number") from None
    if page < 1:
        raise ServerError(422, "page: must be 1 or more")
    since, until = time_range(given.get("since"), given.get("until"))
    view = DetectionFilter(
        application=name,
        model=given.get("model"),
        detector=detector,
        min_score=_score_bound(given["min_score"], "min_score") if "min_score" in given else None,
        max_score=_score_bound(given["max_score"], "max_score") if "max_score" in given else None,
        since=since,
        until=until,
    )
    low, high = view.min_score, view.max_score
    if low is not None and high is not None and low > high:  # nothing could match
        raise ServerError(422, f"min_score: {low:g} is above max_score ({high:g})")
    return view, page


def _moment_text(moment: datetime) -> str:
    """A naive UTC moment as a datetime-local box and a link take it, to the precision it has."""
    if not moment.microsecond:
        return moment.isoformat(timespec="seconds")
    return moment.isoformat(timespec="milliseconds" if moment.microsecond % 1000 == 0 else "auto")


def _unit(width: timedelta) -> str:
    seconds = int(width.total_seconds())
    for size, name in ((86400, "day"), (3600, "hour"), (60, "minute"), (1, "second")):
        if seconds % size == 0:
            count = seconds // size
            return f"{count} {name}{'s' if count != 1 else ''}" if count != 1 else name
    return f"{seconds} seconds"


def _label(moment: datetime, width: timedelta) -> str:
    if width < timedelta(minutes=1):
        return moment.strftime("%H:%M:%S")
    if width < timedelta(days=1):
        return moment.strftime("%m-%d %H:%M")
    return moment.strftime("%Y-%m-%d")


def _rubric_order(comparison: ModelComparison) -> list[tuple[str, str, dict[str, Any]]]:
    """The comparison's instructions in each detector's rubric order."""
    order = {
        (name, i.text): number
        for name, detector in DETECTORS.items()
        for number, i in enumerate(detector.instructions)
    }
    keys = sorted(comparison.instructions, key=lambda k: (k[0], order.get(k, len(order)), k[1]))
    return [(detector, text, comparison.instructions[(detector, text)]) for detector, text in keys]


def _page(session: Session, view: DetectionFilter, page: int) -> dict[str, Any]:
    total = item_count(session, view)
    pages = max(1, math.ceil(total / PAGE_SIZE))
    page = min(page, pages)  # past the end (an old link, fewer items now): the last page
    items = items_page(session, view, PAGE_SIZE, (page - 1) * PAGE_SIZE)
    found = span(session, view)
    width = bucket_width(*found) if found else timedelta(seconds=1)
    series = trends(session, view, width)
    charts = [
        {
            "detector": detector,
            "count": len(values),
            "mean": sum(values) / len(values),
            "histogram": histogram(f"{detector}: items per score band", values),
            "trend": trend(
                f"{detector}: mean score per {_unit(width)}",
                [
                    TrendPoint(
                        _label(b.start, width),
                        b.mean,
                        b.count,
                        (b.start - datetime(1970, 1, 1)).total_seconds(),
                    )
                    for b in series.get(detector, [])
                ],
                _unit(width),
            ),
        }
        for detector, values in scores(session, view).items()
    ]
    comparison = compare_models(session, view)
    return {
        "total": total,
        "page": page,
        "pages": pages,
        "items": items,
        "unit": _unit(width),
        "charts": charts,
        "failures": [(f, failure_bar(f.failure_rate)) for f in instruction_failures(session, view)],
        "comparison": comparison,
        "comparison_rows": _rubric_order(comparison),
        "models": model_names(session, view.application),
    }


def _explanation(detection: Any, instruction: str) -> str:
    """The judge's explanation of one verdict, from the stored result."""
    result = detection.result if isinstance(detection.result, dict) else {}
    for entry in result.get("instructions_list") or []:
        if isinstance(entry, dict) and entry.get("instruction") == instruction:
            return str(entry.get("explanation") or "")
    return ""


@router.get("/applications/{name}", response_class=HTMLResponse)
async def application_page(name: str, request: Request) -> HTMLResponse:
    access = _browser_access(request)
    if isinstance(access, HTMLResponse):
        return access
    params = dict(request.query_params)
    try:
        refuse_nul_in_url(request)
        refuse_repeats(request)
        view, page = parse_filter(name, params)
    except ServerError as error:
        # A page, not the API's JSON: this is what a browser shows after a mistyped filter.
        return _render(
            "page_error.html",
            error.status,
            name=name,
            heading="filter not understood",
            message=f"This filter cannot be read: {error.message}",
            link=f"/applications/{quote(name, safe='')}",
            link_text=f"Show {name} without filters",
        )
    shown = {key: params[key].strip() for key in _FILTER_KEYS if params.get(key, "").strip()}
    # The form's datetime-local boxes take "YYYY-MM-DDTHH:MM:SS[.fff]": an API-style "...Z" or
    # a date alone would show an empty box, and the next Apply would drop the filter. A fraction
    # of a second is kept, in the box and the page links: cut off, it widened the filter.
    for key, moment in (("since", view.since), ("until", view.until)):
        if moment is not None:
            shown[key] = _moment_text(moment)

    def query(session: Session) -> dict[str, Any]:
        return _page(session, view, page)

    try:
        data = await read_application(request, access, name, query)
    except ServerError as error:
        if error.status >= 500:
            raise
        # A page, as for a filter: an unknown application, or a name no application can have.
        return _render(
            "page_error.html",
            error.status,
            name=name,
            heading="not found" if error.status == 404 else "not understood",
            message=f"Nothing to show: {error.message}.",
            link="/",
            link_text="All applications",
        )

    def link(to_page: int) -> str:
        return f"?{urlencode({**shown, 'page': to_page})}"

    return _render(
        "application.html",
        name=name,
        filters=shown,
        detectors=list(DETECTORS),
        previous_link=link(data["page"] - 1) if data["page"] > 1 else None,
        next_link=link(data["page"] + 1) if data["page"] < data["pages"] else None,
        explanations=_explanation,
        **data,
    )
