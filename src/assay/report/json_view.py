"""`assay report --json`: the report (and a comparison, when there is one) as plain JSON data,
the same numbers the page and the tables show."""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

from assay.report.compare import Comparison
from assay.report.model import Report


def _finite(value: Any) -> Any:
    """NaN and infinities (an empty interval, say) become null, which JSON has."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(child) for key, child in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(child) for child in value]
    return value


def report_json(report: Report, comparison: Comparison | None = None) -> dict[str, Any]:
    """The report as a JSON-ready dict: source, row counts, and per scorer its figures (mean
    and interval, histogram, instructions, lowest rows with their text and verdicts, gold
    figures, gate); `comparison` adds what changed against the baseline."""
    data = asdict(report)
    for scorer, shown in zip(report.scorers, data["scorers"], strict=True):
        shown["gate_failed"] = scorer.gate_failed
        shown.pop("figures", None)
    result: dict[str, Any] = {"report": data}
    if comparison is not None:
        result["comparison"] = asdict(comparison)
    return _finite(result)  # type: ignore[no-any-return]
