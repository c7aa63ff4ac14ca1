"""Render a Report as one self-contained HTML file: inline CSS and SVG, no script, no links out."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import jinja2
from markupsafe import Markup

from assay.report import svg
from assay.report.compare import Comparison
from assay.report.model import Report, ScorerReport
from assay.stats import Interval

TEMPLATE = "report.html.j2"


@dataclass(frozen=True)
class ScorerCharts:
    """One scorer's charts as SVG markup (reliability is empty without gold labels)."""

    histogram: Markup
    failures: Markup
    reliability: Markup


def _number(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def _percent(value: float | None) -> str:
    return "–" if value is None else f"{value:.0%}"


def _interval(value: Interval | None) -> str:
    return "" if value is None else f"[{value.low:.3f}, {value.high:.3f}]"


def _environment() -> jinja2.Environment:
    # Built per call rather than at import time: importing assay.report does no work.
    environment = jinja2.Environment(
        loader=jinja2.PackageLoader("assay.report", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.filters.update(number=_number, percent=_percent, interval=_interval)
    return environment


def _charts(scorer: ScorerReport) -> ScorerCharts:
    reliability = ""
    if scorer.gold is not None:
        reliability = svg.reliability_svg(scorer.gold.curve, f"{scorer.name}: calibration curve")
    failures = [(i.instruction, i.failed, i.answered) for i in scorer.instructions]
    return ScorerCharts(
        histogram=Markup(
            svg.histogram_svg(scorer.histogram, f"{scorer.name}: score histogram", scorer.scale)
        ),
        failures=Markup(
            svg.failure_rate_svg(failures, f"{scorer.name}: failure rate per instruction")
        ),
        reliability=Markup(reliability),
    )


def render_html(
    report: Report, title: str, version: str, comparison: Comparison | None = None
) -> str:
    """The report page as a string.

    report: the numbers (see `model.build_report`).
    title: shown in the browser tab (usually the output file's name).
    version: Assay's version, recorded in the page's `generator` meta tag.
    comparison: a baseline comparison to show after the overview (`assay report A B`).
    """
    template = _environment().get_template(TEMPLATE)
    return template.render(
        report=report,
        title=title,
        version=version,
        charts={s.name: _charts(s) for s in report.scorers},
        gated=any(s.threshold is not None for s in report.scorers) or bool(report.gate_messages),
        any_gold=any(s.gold is not None for s in report.scorers),
        comparison=comparison,
    )


def write_html(
    report: Report, path: Path, version: str, comparison: Comparison | None = None
) -> None:
    """Write the report page to `path`, complete or not at all (written aside, then moved).

    report: the numbers; path: the .html file; version: Assay's version for the meta tag;
    comparison: a baseline comparison to include.
    """
    page = render_html(report, Path(report.source).name, version, comparison)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(page, encoding="utf-8")
    os.replace(partial, path)
