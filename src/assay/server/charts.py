"""Small inline-SVG charts drawn by our own code (no JavaScript, nothing from a CDN).

Each function returns safe markup; every shape carries `data-*` attributes with the numbers it
shows, so a test (or a curious reader of the page source) can check the chart against the data.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

from assay import stats

_WIDTH, _HEIGHT, _PAD = 420, 180, 30


@dataclass(frozen=True)
class TrendPoint:
    """One bucket of a trend: its label, mean score, detection count and time."""

    label: str
    mean: float
    count: int
    seconds: float  # the bucket's start, in seconds on any fixed clock (places it on the x axis)


def _frame(title: str, body: str, css_class: str) -> Markup:
    axis = (
        f'<line x1="{_PAD}" y1="{_HEIGHT - _PAD}" x2="{_WIDTH - 10}" y2="{_HEIGHT - _PAD}" '
        'class="axis"/>'
        f'<line x1="{_PAD}" y1="10" x2="{_PAD}" y2="{_HEIGHT - _PAD}" class="axis"/>'
    )
    return Markup(
        f'<svg class="chart {css_class}" viewBox="0 0 {_WIDTH} {_HEIGHT}" role="img" '
        f'aria-label="{escape(title)}" width="{_WIDTH}" height="{_HEIGHT}">'
        f"<title>{escape(title)}</title>{axis}{body}</svg>"
    )


def histogram(title: str, scores: Sequence[float], bins: int = 10) -> Markup:
    """Distribution of 0–1 scores in `bins` equal bins (a score of 1.0 goes in the last)."""
    counts = stats.histogram(Counter(scores), bins)
    tallest = max(counts) or 1
    plot_width = _WIDTH - _PAD - 20
    bar_width = plot_width / bins
    plot_height = _HEIGHT - _PAD - 10
    parts = []
    for index, count in enumerate(counts):
        height = plot_height * count / tallest
        x = _PAD + index * bar_width
        low, high = index / bins, (index + 1) / bins
        parts.append(
            f'<rect class="bar" x="{x + 1:.1f}" y="{_HEIGHT - _PAD - height:.1f}" '
            f'width="{bar_width - 2:.1f}" height="{height:.1f}" data-count="{count}" '
            f'data-range="{low:.1f}-{high:.1f}"><title>{low:.1f}–{high:.1f}: {count}</title></rect>'
        )
    labels = "".join(
        f'<text x="{_PAD + i * plot_width / 5:.1f}" y="{_HEIGHT - 12}" class="tick" '
        f'text-anchor="middle">{i / 5:.1f}</text>'
        for i in range(6)
    )
    return _frame(title, "".join(parts) + labels, "histogram")


def trend(title: str, points: Sequence[TrendPoint]) -> Markup:
    """Mean score per time bucket as a line with a dot per bucket (y axis 0–1)."""
    plot_width = _WIDTH - _PAD - 20
    plot_height = _HEIGHT - _PAD - 10
    # x is proportional to time, so gaps between buckets show as gaps.
    start = points[0].seconds if points else 0.0
    span = (points[-1].seconds - start) if len(points) > 1 else 1.0
    coordinates = [
        (
            _PAD + 10 + plot_width * (point.seconds - start) / (span or 1.0),
            _HEIGHT - _PAD - plot_height * point.mean,
        )
        for point in points
    ]
    line = " ".join(f"{x:.1f},{y:.1f}" for x, y in coordinates)
    parts = [f'<polyline class="line" points="{line}"/>'] if len(points) > 1 else []
    for (x, y), point in zip(coordinates, points, strict=True):
        parts.append(
            f'<circle class="dot" cx="{x:.1f}" cy="{y:.1f}" r="4" data-mean="{point.mean:.4f}" '
            f'data-count="{point.count}"><title>{escape(point.label)}: mean {point.mean:.2f} '
            f"({point.count})</title></circle>"
        )
    ticks = "".join(
        f'<text x="2" y="{_HEIGHT - _PAD - plot_height * v + 4:.1f}" class="tick">{v:.1f}</text>'
        for v in (0.0, 0.5, 1.0)
    )
    if points:  # the time range: first bucket under the left end, last under the right
        ticks += (
            f'<text x="{_PAD}" y="{_HEIGHT - 12}" class="tick">{escape(points[0].label)}</text>'
        )
        if len(points) > 1:
            ticks += (
                f'<text x="{_WIDTH - 10}" y="{_HEIGHT - 12}" class="tick" text-anchor="end">'
                f"{escape(points[-1].label)}</text>"
            )
    return _frame(title, "".join(parts) + ticks, "trend")


def failure_bar(rate: float) -> Markup:
    """A horizontal bar for a failure rate between 0 and 1."""
    width = 160
    filled = width * max(0.0, min(rate, 1.0))
    return Markup(
        f'<svg class="failbar" width="{width}" height="12" data-rate="{rate:.4f}">'
        f'<rect class="track" width="{width}" height="12"/>'
        f'<rect class="fill" width="{filled:.1f}" height="12"/></svg>'
    )
