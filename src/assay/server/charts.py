"""Small inline-SVG charts drawn by our own code (no JavaScript, nothing from a CDN).

Each function returns safe markup that scales to its container's width (a `viewBox`, width
100%); both axes have ticks and a label with the unit. Every shape carries `data-*` attributes
with the numbers it shows, so a test (or a curious reader of the page source) can check the
chart against the data.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

from assay import stats

_WIDTH, _HEIGHT = 520, 220
_LEFT, _RIGHT, _TOP, _BOTTOM = 52, 14, 12, 42


@dataclass(frozen=True)
class TrendPoint:
    """One bucket of a trend: its label, mean score, detection count and time."""

    label: str
    mean: float
    count: int
    seconds: float  # the bucket's start, in seconds on any fixed clock (places it on the x axis)


def _plot() -> tuple[float, float]:
    return _WIDTH - _LEFT - _RIGHT, _HEIGHT - _TOP - _BOTTOM


def _count_ticks(largest: int) -> list[int]:
    """Up to five round tick values from 0 to at least `largest`."""
    if largest <= 0:
        return [0, 1]
    raw = largest / 4
    magnitude = 10 ** math.floor(math.log10(raw)) if raw >= 1 else 1
    step = max(int(next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)), 1)
    return list(range(0, largest + step, step))


def _frame(title: str, body: str, css_class: str, x_label: str, y_label: str) -> Markup:
    plot_w, plot_h = _plot()
    bottom = _TOP + plot_h
    axes = (
        f'<line x1="{_LEFT}" y1="{bottom}" x2="{_LEFT + plot_w}" y2="{bottom}" class="axis"/>'
        f'<line x1="{_LEFT}" y1="{_TOP}" x2="{_LEFT}" y2="{bottom}" class="axis"/>'
        f'<text class="axis-label x-label" x="{_LEFT + plot_w / 2:.1f}" y="{_HEIGHT - 4}" '
        f'text-anchor="middle">{escape(x_label)}</text>'
        f'<text class="axis-label y-label" x="12" y="{_TOP + plot_h / 2:.1f}" text-anchor="middle" '
        f'transform="rotate(-90 12 {_TOP + plot_h / 2:.1f})">{escape(y_label)}</text>'
    )
    return Markup(
        f'<svg class="chart {css_class}" viewBox="0 0 {_WIDTH} {_HEIGHT}" role="img" '
        f'aria-label="{escape(title)}" preserveAspectRatio="xMinYMin meet">'
        f"<title>{escape(title)}</title>{axes}{body}</svg>"
    )


def _y_ticks(values: Sequence[float], top: float, labels: Sequence[str]) -> str:
    """Grid lines and labels on the y axis for `values` (plotted from 0 to `top`)."""
    plot_w, plot_h = _plot()
    parts = []
    for value, label in zip(values, labels, strict=True):
        y = _TOP + plot_h - plot_h * value / top
        parts.append(
            f'<line x1="{_LEFT}" y1="{y:.1f}" x2="{_LEFT + plot_w}" y2="{y:.1f}" class="grid"/>'
            f'<text class="tick y-tick" x="{_LEFT - 6}" y="{y + 4:.1f}" text-anchor="end" '
            f'data-value="{value:g}">{escape(label)}</text>'
        )
    return "".join(parts)


def histogram(title: str, scores: Sequence[float], bins: int = 10) -> Markup:
    """Distribution of 0–1 scores in `bins` equal bins (a score of 1.0 goes in the last); the
    y axis counts items."""
    counts = stats.histogram(Counter(scores), bins)
    ticks = _count_ticks(max(counts, default=0))
    top = ticks[-1]
    plot_w, plot_h = _plot()
    bar_width = plot_w / bins
    parts = [_y_ticks(ticks, top, [str(t) for t in ticks])]
    for index, count in enumerate(counts):
        height = plot_h * count / top
        x = _LEFT + index * bar_width
        low, high = index / bins, (index + 1) / bins
        parts.append(
            f'<rect class="bar" x="{x + 1:.1f}" y="{_TOP + plot_h - height:.1f}" '
            f'width="{bar_width - 2:.1f}" height="{height:.1f}" data-count="{count}" '
            f'data-range="{low:.1f}-{high:.1f}"><title>score {low:.1f}–{high:.1f}: {count} '
            f"items</title></rect>"
        )
    parts.extend(
        f'<text class="tick x-tick" x="{_LEFT + i * plot_w / 5:.1f}" y="{_TOP + plot_h + 14}" '
        f'text-anchor="middle">{i / 5:.1f}</text>'
        for i in range(6)
    )
    return _frame(title, "".join(parts), "histogram", "score", "items")


def trend(title: str, points: Sequence[TrendPoint], unit: str) -> Markup:
    """Mean score per time bucket as a line with a dot per bucket (y axis 0–1); `unit` names
    the bucket width in the x axis label (e.g. "5 s")."""
    plot_w, plot_h = _plot()
    # x is proportional to time, so gaps between buckets show as gaps; a single bucket sits in
    # the middle.
    start = points[0].seconds if points else 0.0
    length = points[-1].seconds - start if len(points) > 1 else 0.0
    coordinates = [
        (
            _LEFT + 10 + (plot_w - 20) * ((p.seconds - start) / length if length else 0.5),
            _TOP + plot_h - plot_h * p.mean,
        )
        for p in points
    ]
    parts = [_y_ticks([0.0, 0.25, 0.5, 0.75, 1.0], 1.0, ["0", "0.25", "0.5", "0.75", "1"])]
    if len(points) > 1:
        line = " ".join(f"{x:.1f},{y:.1f}" for x, y in coordinates)
        parts.append(f'<polyline class="line" points="{line}"/>')
    for (x, y), point in zip(coordinates, points, strict=True):
        parts.append(
            f'<circle class="dot" cx="{x:.1f}" cy="{y:.1f}" r="4" data-mean="{point.mean:.4f}" '
            f'data-count="{point.count}" data-start="{escape(point.label)}">'
            f"<title>{escape(point.label)}: mean {point.mean:.2f} over {point.count} "
            f"detections</title></circle>"
        )
    if points:  # the time range: first bucket under the left end, last under the right
        y = _TOP + plot_h + 14
        parts.append(
            f'<text class="tick x-tick" x="{_LEFT}" y="{y}">{escape(points[0].label)}</text>'
        )
        if len(points) > 1:
            parts.append(
                f'<text class="tick x-tick" x="{_LEFT + plot_w}" y="{y}" text-anchor="end">'
                f"{escape(points[-1].label)}</text>"
            )
    x_label = f"time (UTC), one point per {unit}"
    return _frame(title, "".join(parts), "trend", x_label, "mean score")


def failure_bar(rate: float) -> Markup:
    """A horizontal bar for a failure rate between 0 and 1."""
    width = 160
    filled = width * max(0.0, min(rate, 1.0))
    return Markup(
        f'<svg class="failbar" width="{width}" height="12" data-rate="{rate:.4f}">'
        f'<rect class="track" width="{width}" height="12"/>'
        f'<rect class="fill" width="{filled:.1f}" height="12"/></svg>'
    )
