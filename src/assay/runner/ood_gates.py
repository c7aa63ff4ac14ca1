"""CI gates of `assay ood` and its JUnit file.

Three gates over a run's `OODSummary`: the mean score (`--fail-under`), the over-rejection rate
(`--max-over-rejection`) and the missed-refusal rate (`--max-missed-refusal`). A mean score alone
cannot gate this metric: a system that declines everything still scores 0.75 with three probes
per row, but its over-rejection rate is 1.

The JUnit file has one test case per gate (failed when the gate fails) and one per row (an
error when the row could not be scored, skipped with `--allow-errors`; otherwise its cases,
wrong ones marked ✗). It follows the exit code's rule (`cli.common.outcome_code`): a failure
exactly when a gate failed (exit 1), an error exactly when rows errored and were not allowed
(exit 3), so CI and the file agree.

No gate passes on rows it could not score. The mean-score gate is `assay report`'s own
(`runner.gates.fail_under_gates`): an errored row counts as a failure. A rate gate fails when the
run has nothing to measure it on (no in-scope or no out-of-scope case) or when every row errored,
as a gate that cannot be checked must not pass; a limit of 1 turns a rate gate off.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from assay.metrics.ood import METRIC_NAME as METRIC
from assay.metrics.ood.summary import OODSummary, OODTally
from assay.runner.gates import (
    GateFigures,
    JunitCounts,
    fail_under_gates,
    junit_problem,
    xml_text,
)

#: Gates `assay ood` applies unless told otherwise: each fails a system that declines
#: everything (over-rejection rate 1) or answers everything (missed-refusal rate 1).
DEFAULT_MAX_OVER_REJECTION = 0.25
DEFAULT_MAX_MISSED_REFUSAL = 0.25


def mean_gate_caveat(summary: OODSummary, gate: str = "mean-score") -> str | None:
    """What a passed `--fail-under` gate (or, with gate "regression", `--fail-on-regression`)
    on this metric hides, when `assay run` or `assay report` gates it by its mean alone: an
    over-rejection or missed-refusal rate above `assay ood`'s default limits (None when both
    are within them)."""
    rates = (
        ("over-rejection", summary.over_rejection_rate, DEFAULT_MAX_OVER_REJECTION),
        ("missed-refusal", summary.missed_refusal_rate, DEFAULT_MAX_MISSED_REFUSAL),
    )
    over = [
        f"{name} rate {rate:.2f}"
        for name, rate, limit in rates
        if rate is not None and rate > limit
    ]
    if not over:
        return None
    return (
        f"{METRIC} passed its {gate} gate with {' and '.join(over)}: a mean alone does not "
        "gate this metric (a system that declines everything scores 0.75 with three probes); "
        "gate the rates with --max-over-rejection / --max-missed-refusal (assay report on "
        "this output, or assay ood)"
    )


@dataclass(frozen=True)
class Gate:
    """One gate's outcome.

    name: what is gated, e.g. "over-rejection rate <= 0.25".
    value: the run's figure (None when the run has none, which fails the gate).
    passed: whether the figure is within the limit.
    reason: why a gate failed when the figure alone does not say (rows it could not score).
    """

    name: str
    value: float | None
    passed: bool
    reason: str | None = None

    @property
    def message(self) -> str:
        if self.reason:
            return self.reason
        shown = "none (nothing to measure it on)" if self.value is None else f"{self.value:.4f}"
        return f"{self.name}: {shown}"


def tally_figures(tally: OODTally, floor: float = 0.0) -> GateFigures:
    """What the mean-score gate checks (`runner.gates.GateFigures`): the scores and the rows
    that have none, each counted as `floor` (the config's `min`)."""
    unscored = tally.rows - tally.rows_scored
    return GateFigures(tally.score_total, tally.rows_scored, unscored, floor=floor)


def ood_gates(
    summary: OODSummary,
    figures: GateFigures,
    fail_under: float | None,
    max_over_rejection: float | None,
    max_missed_refusal: float | None,
) -> list[Gate]:
    """The gates asked for (None skips one), in a fixed order.

    summary: the run's summary; figures: its scores for the mean-score gate (`tally_figures`).
    fail_under: least mean score; max_over_rejection / max_missed_refusal: highest rates.
    """
    gates = []
    if fail_under is not None:
        (case,) = fail_under_gates({METRIC: figures}, {METRIC: fail_under}, "--fail-under")
        name = f"mean score >= {fail_under:g}"
        # The figure compared: unscored rows count as the lowest score.
        gates.append(Gate(name, figures.gated_mean, case.failure is None, case.failure))
    for name, limit, value in (
        ("over-rejection rate", max_over_rejection, summary.over_rejection_rate),
        ("missed-refusal rate", max_missed_refusal, summary.missed_refusal_rate),
    ):
        if limit is None or limit >= 1:
            continue
        name = f"{name} <= {limit:g}"
        if summary.rows and not summary.rows_scored:
            # The cases judged in errored rows are no run to pass on.
            reason = f"{name}: every row errored, so no scored row to measure it on"
            gates.append(Gate(name, value, False, reason))
            continue
        gates.append(Gate(name, value, value is not None and value <= limit + 1e-9))
    return gates


def _case_text(result: Mapping[str, Any]) -> str:
    lines = []
    for case in result.get("cases") or []:
        mark = "✓" if case.get("correct") else "✗"
        what = case.get("label") or case.get("status")
        reply = case.get("reply") or case.get("error") or ""
        flag = " [probe looks in scope to the judge]" if case.get("scope_flagged") else ""
        lines.append(f"{mark} {case.get('kind', '')} {what}{flag}: {case.get('query', '')!r}")
        lines.append(f"    reply: {reply[:300]!r}")
    return "\n".join(lines)


def write_ood_junit(
    lines: Iterable[Mapping[str, Any]],
    path: Path,
    gates: list[Gate],
    metric: str,
    allow_errors: bool = False,
) -> JunitCounts:
    """Write the JUnit file (see the module doc); returns its counts.

    lines: the run's output lines (`runner.metric_rows.metric_line`).
    path: where to write (complete or not at all). gates: from `ood_gates`.
    metric: the key of the metric's results in each line.
    allow_errors: errored rows are skipped cases, not errors (`--allow-errors`).
    """
    suite = ET.Element("testsuite", {"name": "assay.ood"})
    counts = JunitCounts()
    for gate in gates:
        case = ET.SubElement(suite, "testcase", {"classname": "assay.ood.gates", "name": gate.name})
        if not gate.passed:
            counts.failures += 1
            ET.SubElement(case, "failure", {"type": "gate", "message": gate.message})
        else:
            ET.SubElement(case, "system-out").text = gate.message
    for line in lines:
        name = str(line.get("id") if line.get("id") not in (None, "") else f"row {line.get('row')}")
        case = ET.SubElement(
            suite, "testcase", {"classname": "assay.ood.rows", "name": xml_text(name)}
        )
        result = line.get(metric)
        rejected = line.get("error")
        if isinstance(rejected, Mapping) or not isinstance(result, Mapping):
            message = str(rejected.get("message")) if isinstance(rejected, Mapping) else "no result"
            junit_problem(case, "invalid_row", message, "", allow_errors)
        elif result.get("error") is True:
            message = str(result.get("message", ""))
            text = xml_text(_case_text(result))
            junit_problem(case, str(result.get("kind")), message, text, allow_errors)
        else:
            ET.SubElement(case, "system-out").text = xml_text(
                f"score {float(result['score']):.4g}\n{_case_text(result)}"
            )
    counts.tests = len(suite)
    counts.errors = sum(case.find("error") is not None for case in suite)
    counts.skipped = sum(case.find("skipped") is not None for case in suite)
    suite.attrib.update(
        tests=str(counts.tests),
        failures=str(counts.failures),
        errors=str(counts.errors),
        skipped=str(counts.skipped),
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    ET.ElementTree(suite).write(partial, encoding="utf-8", xml_declaration=True)
    os.replace(partial, path)
    return counts
