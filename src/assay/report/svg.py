"""Inline SVG charts for the HTML report, drawn from numbers by our own code.

Each function returns one `<svg>` element as a string, ready to paste into the page: no script,
no external stylesheet or font, so the report opens anywhere, offline. Every mark carries its
numbers as `data-*` attributes and a `<title>` tooltip, which is also what the tests read back.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from html import escape

from assay.stats import UNIT_SCALE, CalibrationBin, ScoreScale

BAR_COLOUR = "#4c72b0"
FAIL_COLOUR = "#c44e52"
GOOD_COLOUR = "#55a868"
AXIS_COLOUR = "#555"
GRID_COLOUR = "#ddd"
FONT = "font-family:system-ui,-apple-system,'Segoe UI',sans-serif"


def _n(value: float) -> str:
    """A coordinate with one decimal at most (keeps the markup short)."""
    return f"{value:.1f}".rstrip("0").rstrip(".")


def _attrs(attributes: dict[str, object]) -> str:
    """Keyword arguments as SVG attributes: `text_anchor` -> `text-anchor`, `class_` -> `class`."""
    return " ".join(
        f'{name.rstrip("_").replace("_", "-")}="{escape(str(value))}"'
        for name, value in attributes.items()
    )


def _text(x: float, y: float, content: str, **attributes: object) -> str:
    extra = _attrs(attributes)
    return f'<text x="{_n(x)}" y="{_n(y)}" {extra}>{escape(content)}</text>'


def _line(x1: float, y1: float, x2: float, y2: float, colour: str, **attributes: object) -> str:
    extra = _attrs(attributes)
    return (
        f'<line x1="{_n(x1)}" y1="{_n(y1)}" x2="{_n(x2)}" y2="{_n(y2)}" stroke="{colour}" {extra}/>'
    )


def _svg(width: float, height: float, chart: str, label: str, body: list[str]) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_n(width)}" height="{_n(height)}" '
        f'viewBox="0 0 {_n(width)} {_n(height)}" role="img" aria-label="{escape(label)}" '
        f'data-chart="{chart}" style="{FONT};font-size:12px">'
        f"<title>{escape(label)}</title>" + "".join(body) + "</svg>"
    )


def _count_ticks(largest: int) -> list[int]:
    """Up to five round tick values from 0 to at least `largest`."""
    if largest <= 0:
        return [0, 1]
    raw_step = largest / 4
    magnitude = 10 ** math.floor(math.log10(raw_step)) if raw_step >= 1 else 1
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw_step)
    step = max(int(step), 1)
    return list(range(0, largest + step, step))


def histogram_svg(counts: Sequence[int], label: str, scale: ScoreScale = UNIT_SCALE) -> str:
    """A histogram of scores: `counts[i]` rows fell in the i-th of len(counts) equal bins over
    the scale's range ([0, 1] unless a metric's config rescales its score).

    counts: rows per bin, lowest scores first.
    label: what the chart shows (its accessible name and tooltip).
    scale: the range the bins cover.
    """
    width, height = 560.0, 240.0
    left, right, top, bottom = 48.0, 16.0, 12.0, 40.0
    plot_w, plot_h = width - left - right, height - top - bottom
    ticks = _count_ticks(max(counts, default=0))
    y_max = ticks[-1]
    body = []
    for tick in ticks:
        y = top + plot_h - plot_h * tick / y_max
        body.append(_line(left, y, left + plot_w, y, GRID_COLOUR))
        body.append(_text(left - 6, y + 4, str(tick), text_anchor="end", fill=AXIS_COLOUR))
    bins = len(counts)
    slot = plot_w / max(bins, 1)
    for number, count in enumerate(counts):
        low, high = scale.at(number / bins), scale.at((number + 1) / bins)
        bar_h = plot_h * count / y_max
        x, y = left + number * slot + 1, top + plot_h - bar_h
        closing = "]" if number == bins - 1 else ")"
        tip = f"score [{scale.label(low)}, {scale.label(high)}{closing}: {count} rows"
        body.append(
            f'<rect class="bar" x="{_n(x)}" y="{_n(y)}" width="{_n(slot - 2)}" '
            f'height="{_n(bar_h)}" fill="{BAR_COLOUR}" data-low="{low:g}" data-high="{high:g}" '
            f'data-count="{count}"><title>{escape(tip)}</title></rect>'
        )
    for number in range(0, bins + 1, max(bins // 5, 1)):
        x = left + number * slot
        body.append(_line(x, top + plot_h, x, top + plot_h + 4, AXIS_COLOUR))
        body.append(
            _text(
                x,
                top + plot_h + 16,
                scale.label(scale.at(number / bins)),
                text_anchor="middle",
                fill=AXIS_COLOUR,
            )
        )
    body.append(_line(left, top + plot_h, left + plot_w, top + plot_h, AXIS_COLOUR))
    body.append(_text(left + plot_w / 2, height - 6, "score", text_anchor="middle"))
    body.append(
        _text(
            12,
            top + plot_h / 2,
            "rows",
            text_anchor="middle",
            transform=f"rotate(-90 12 {_n(top + plot_h / 2)})",
        )
    )
    return _svg(width, height, "histogram", label, body)


def failure_rate_svg(rows: Sequence[tuple[str, int, int]], label: str) -> str:
    """Horizontal bars: the share of rows that failed each instruction.

    rows: (instruction text, rows that failed it, rows where it was judged), in rubric order.
    label: what the chart shows.
    """
    width, left, right = 720.0, 8.0, 150.0
    bar_w, bar_h = width - left - right, 14.0
    body, y = [], 8.0
    for text, failed, answered in rows:
        rate = failed / answered if answered else 0.0
        for line_text in textwrap.wrap(text, 100) or [""]:
            y += 15
            body.append(_text(left, y, line_text))
        y += 5
        body.append(
            f'<rect x="{_n(left)}" y="{_n(y)}" width="{_n(bar_w)}" height="{_n(bar_h)}" '
            f'fill="#eee"/>'
        )
        tip = f"{text} — failed by {failed} of {answered} rows ({rate:.0%})"
        body.append(
            f'<rect class="bar" x="{_n(left)}" y="{_n(y)}" width="{_n(bar_w * rate)}" '
            f'height="{_n(bar_h)}" fill="{FAIL_COLOUR}" data-instruction="{escape(text)}" '
            f'data-failed="{failed}" data-answered="{answered}" data-rate="{rate:.4f}">'
            f"<title>{escape(tip)}</title></rect>"
        )
        body.append(_text(left + bar_w + 8, y + 11, f"{rate:.0%} failed ({failed}/{answered})"))
        y += bar_h + 8
    return _svg(width, y + 4, "failure-rates", label, body)


def reliability_svg(curve: Sequence[CalibrationBin], label: str) -> str:
    """A reliability curve: mean score per bin (x) against the share of gold positives (y).

    Points on the dashed diagonal are perfectly calibrated; each point's area grows with the
    rows in its bin.
    curve: the calibration bins (see `stats.calibration_curve`).
    label: what the chart shows.
    """
    left, top, plot, bottom = 58.0, 14.0, 240.0, 44.0
    width, height = left + plot + 18, top + plot + bottom

    def x_of(value: float) -> float:
        return left + plot * value

    def y_of(value: float) -> float:
        return top + plot * (1 - value)

    body = []
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        body.append(_line(x_of(0), y_of(tick), x_of(1), y_of(tick), GRID_COLOUR))
        body.append(
            _text(x_of(0) - 6, y_of(tick) + 4, f"{tick:g}", text_anchor="end", fill=AXIS_COLOUR)
        )
        body.append(
            _text(x_of(tick), y_of(0) + 16, f"{tick:g}", text_anchor="middle", fill=AXIS_COLOUR)
        )
    body.append(
        _line(
            x_of(0),
            y_of(0),
            x_of(1),
            y_of(1),
            AXIS_COLOUR,
            stroke_dasharray="4 4",
            class_="diagonal",
        )
    )
    body.append(_line(x_of(0), y_of(0), x_of(1), y_of(0), AXIS_COLOUR))
    body.append(_line(x_of(0), y_of(0), x_of(0), y_of(1), AXIS_COLOUR))
    points = " ".join(f"{_n(x_of(p.mean_score))},{_n(y_of(p.observed_rate))}" for p in curve)
    if points:
        body.append(
            f'<polyline points="{points}" fill="none" stroke="{BAR_COLOUR}" stroke-width="2"/>'
        )
    largest = max((p.rows for p in curve), default=1)
    for p in curve:
        radius = 3 + 5 * math.sqrt(p.rows / largest)
        tip = (
            f"scores [{p.low:.1f}, {p.high:.1f}): mean score {p.mean_score:.2f}, "
            f"{p.observed_rate:.0%} gold-positive, {p.rows} rows"
        )
        body.append(
            f'<circle class="point" cx="{_n(x_of(p.mean_score))}" cy="{_n(y_of(p.observed_rate))}" '
            f'r="{_n(radius)}" fill="{BAR_COLOUR}" fill-opacity="0.8" '
            f'data-mean-score="{p.mean_score:.4f}" data-observed="{p.observed_rate:.4f}" '
            f'data-rows="{p.rows}"><title>{escape(tip)}</title></circle>'
        )
    body.append(_text(x_of(0.5), height - 6, "mean score in bin", text_anchor="middle"))
    middle = y_of(0.5)
    body.append(
        _text(
            12,
            middle,
            "share gold-positive",
            text_anchor="middle",
            transform=f"rotate(-90 12 {_n(middle)})",
        )
    )
    return _svg(width, height, "reliability", label, body)
