"""CI gates over a run's output: `--fail-under NAME=THRESHOLD` and JUnit XML.

`parse_fail_under` turns the flag's values into thresholds, `check_fail_under` compares each
scorer's mean score with them, counting the rows it could not score as failures (a gate must
never pass on rows it could not score), and `write_junit` writes one JUnit test case per output
line plus one per gate. The file agrees with the exit code: a gate that failed is a failure, a
row that errored is an error (or skipped, with `--allow-errors`), and a row whose score is
below a threshold only says so in its text, since gates are on mean scores.
Scorers are found generically: any key of an output line whose value has a numeric `score`
(a detector or a metric), or `{"error": true, ...}` for one that failed on the row.
"""

from __future__ import annotations

import itertools
import math
import os
import re
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from assay.runner.output import id_text, scorer_results
from assay.schema import RequestValidationError
from assay.stats import UNIT_SCALE, ScoreScale

FAIL_UNDER_FLAG = "--fail-under"
#: Score ranges when no scorer is rescaled: every score runs from 0 to 1.
NO_RESCALING: Mapping[str, ScoreScale] = MappingProxyType({})
#: Means this close below a threshold still pass: they differ from it only by float rounding.
_TOLERANCE = 1e-9
#: Characters XML 1.0 cannot carry, even escaped; they are dropped from JUnit text.
_XML_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def parse_fail_under(
    specs: Iterable[str],
    known: Iterable[str] | None = None,
    flag: str = FAIL_UNDER_FLAG,
    scales: Mapping[str, ScoreScale] | None = NO_RESCALING,
) -> dict[str, float]:
    """Parse `NAME=THRESHOLD` values of a repeatable flag into {name: threshold}.

    specs: the flag's values, e.g. ["output_relevance=0.7", "completeness=0.6"].
    known: detector and metric names that may be gated; None accepts any name (a name the
        output turns out not to have is then reported by `check_fail_under`).
    flag: the flag's spelling, used in error messages.
    scales: each scorer's score range where it is not [0, 1] (a rescaled metric; by default
        none is); None when the ranges are not known yet: the caller then checks the thresholds
        with `check_scales` once it has read them.
    Raises RequestValidationError(flag, ...) naming the bad value and what is wrong with it.
    """
    allowed = None if known is None else sorted(known)
    if isinstance(specs, str):  # one value, not its characters
        specs = [specs]
    thresholds: dict[str, float] = {}
    for spec in specs:
        name, equals, number = spec.partition("=")
        name, number = name.strip(), number.strip()
        if not equals or not name or not number:
            raise RequestValidationError(
                flag, f"{spec!r} is not NAME=THRESHOLD (for example output_relevance=0.7)"
            )
        try:
            threshold = float(number)
        except ValueError:
            raise RequestValidationError(
                flag, f"{spec!r}: threshold {number!r} is not a number"
            ) from None
        if not math.isfinite(threshold):
            raise RequestValidationError(flag, f"{spec!r}: threshold {number} is not finite")
        if allowed is not None and name not in allowed:
            raise RequestValidationError(
                flag,
                f"{spec!r}: {name!r} is not among the scorers here ({', '.join(allowed)}): "
                "score it too, or drop the gate",
            )
        if name in thresholds:
            raise RequestValidationError(flag, f"{name!r} is given twice")
        if scales is not None:
            check_scales({name: threshold}, scales, flag, spec)
        thresholds[name] = threshold
    return thresholds


def refuse_inverted(thresholds: Mapping[str, float], inverted: Iterable[str]) -> None:
    """Raise RequestValidationError(--fail-under) for a gate on a score its metric's config
    inverts (`inverted: true`: an error rate, higher is worse): a least mean would pass the
    worst runs and fail the best."""
    for name in thresholds:
        if name in inverted:
            raise RequestValidationError(
                FAIL_UNDER_FLAG,
                f"{name}'s config sets inverted: true, so its score is an error rate (higher is "
                "worse), which a least mean cannot gate: gate its rates (--max-over-rejection, "
                "--max-missed-refusal) or leave inverted off",
            )


def check_scales(
    thresholds: Mapping[str, float],
    scales: Mapping[str, ScoreScale],
    flag: str = FAIL_UNDER_FLAG,
    spec: str | None = None,
) -> None:
    """Raise RequestValidationError(flag, ...) for a threshold outside its scorer's score range
    (`scales`; [0, 1] for a scorer not in it): such a gate would pass or fail every run.
    spec: the flag's value as given, quoted in the message (default NAME=THRESHOLD)."""
    for name, threshold in thresholds.items():
        scale = scales.get(name, UNIT_SCALE)
        if not scale.low <= threshold <= scale.high:
            low, high = f"{scale.low:g}", f"{scale.high:g}"
            given = spec if spec is not None else f"{name}={threshold:g}"
            raise RequestValidationError(
                flag,
                f"{given!r}: threshold {threshold:g} is outside {low} to {high} "
                f"({name}'s scores run from {low} to {high})",
            )


@dataclass(frozen=True)
class GateCase:
    """One gate as a JUnit test case: its name (e.g. `--fail-under output_relevance=0.7`) and
    why it failed (None when it passed)."""

    name: str
    failure: str | None = None


@dataclass(frozen=True)
class GateFigures:
    """What a `--fail-under` gate needs to know about one scorer over a run.

    score_total / rows_scored: the sum and count of its scores.
    rows_unscored: rows it could not score: its own errors, rows rejected before scoring, and
        rows without its inputs.
    floor: the lowest score the scorer can give (0, or a rescaled metric's `min`): what each
        unscored row counts as.
    """

    score_total: float
    rows_scored: int
    rows_unscored: int = 0
    floor: float = 0.0

    @property
    def mean(self) -> float | None:
        """Mean over scored rows (what the report shows); None when none was scored."""
        return self.score_total / self.rows_scored if self.rows_scored else None

    @property
    def gated_mean(self) -> float | None:
        """Mean with every unscored row counted as the lowest score (`floor`): what the gate
        compares. It is a bound for the gate only; no row is ever reported with that score."""
        rows = self.rows_scored + self.rows_unscored
        total = self.score_total + self.floor * self.rows_unscored
        return total / rows if rows and self.rows_scored else None


def fail_under_gates(
    figures: Mapping[str, GateFigures],
    thresholds: Mapping[str, float],
    flag: str = FAIL_UNDER_FLAG,
) -> list[GateCase]:
    """Each `--fail-under` gate and how it ended (`GateCase.failure` says why it failed).

    figures: per detector or metric over the run (see `GateFigures`).
    thresholds: from `parse_fail_under`.
    flag: the flag's spelling, used in the names and messages.
    A gate fails when the scorer's mean, counting rows it could not score as failures, is below
    its threshold; a gated name the run never scored fails too: a gate that cannot be checked
    must not pass.
    """
    cases = []
    scored = ", ".join(figures) or "nothing"
    for name, threshold in thresholds.items():
        label = f"{flag} {name}={threshold:g}"
        gate = figures.get(name)
        failure = None
        if gate is None:
            failure = f"{label}: the output has no {name!r} results (it has: {scored})"
        elif gate.mean is None or gate.gated_mean is None:
            failure = f"{label}: every row's {name} errored"
        elif not meets(gate.gated_mean, threshold):
            failure = f"{name}: mean score {gate.mean:.4f} is below {flag} threshold {threshold:g}"
            if gate.rows_unscored:
                missed = f"{gate.rows_unscored} row" + ("s" if gate.rows_unscored != 1 else "")
                counted = "failures" if gate.floor == 0 else f"failures ({gate.floor:g} each)"
                failure = (
                    f"{name}: mean score {gate.mean:.4f} over {gate.rows_scored} scored rows is "
                    f"{gate.gated_mean:.4f} counting the {missed} it could not score as "
                    f"{counted}, below {flag} threshold {threshold:g}"
                )
        cases.append(GateCase(label, failure))
    return cases


def check_fail_under(
    figures: Mapping[str, GateFigures],
    thresholds: Mapping[str, float],
    flag: str = FAIL_UNDER_FLAG,
) -> list[str]:
    """One message per gate that fails (see `fail_under_gates`); empty when all passed."""
    return [g.failure for g in fail_under_gates(figures, thresholds, flag) if g.failure]


def meets(value: float, threshold: float) -> bool:
    """The pass rule of every gate: at or above the threshold (within float rounding)."""
    return value >= threshold - _TOLERANCE


def gate_passed(figures: GateFigures | None, threshold: float) -> bool:
    """Whether one gate passes (the rule `check_fail_under` applies)."""
    gated = figures.gated_mean if figures is not None else None
    return gated is not None and meets(gated, threshold)


def describe_result(name: str, result: Mapping[str, Any], threshold: float | None = None) -> str:
    """A readable breakdown of one scorer's result: its score, then each instruction with its
    label (✓ followed, ✗ not), follow_probability and explanation.

    name: the detector or metric.
    result: its wire result, or its `{"error": true, "kind", "message"}` object.
    threshold: the score it had to reach, mentioned in the heading when given.
    """
    if result.get("error") is True:
        return f"{name}: error ({result.get('kind', 'error')}): {result.get('message', '')}"
    score = float(result["score"])
    heading = f"{name}: score {score:.4g}"
    if threshold is not None:
        below = not meets(score, threshold)
        heading += f" ({'below' if below else 'meets'} threshold {threshold:g})"
    lines = [heading]
    for entry in result.get("instructions_list") or []:
        mark = "✓" if entry.get("label") else "✗"
        probability = float(entry.get("follow_probability", 0.0))
        lines.append(f"  {mark} {entry.get('instruction', '')} (p={probability:.4f})")
        if entry.get("explanation"):
            lines.append(f"      {entry['explanation']}")
    return "\n".join(lines)


@dataclass
class JunitCounts:
    """What `write_junit` wrote: test cases, failures (gates), errors and skipped rows."""

    tests: int = 0
    failures: int = 0
    errors: int = 0
    skipped: int = 0


def xml_text(text: str) -> str:
    """`text` without the characters XML 1.0 cannot carry (for JUnit files)."""
    return _XML_ILLEGAL.sub("", text)


def _case_name(line: Mapping[str, Any]) -> str:
    row_id, row = line.get("id"), line.get("row")
    if row_id not in (None, ""):
        return id_text(row_id)
    return f"row {row}" if row is not None else "row"


def junit_problem(case: ET.Element, kind: str, message: str, text: str, allow_errors: bool) -> None:
    """An errored row: a JUnit error, or a skipped case when errors are allowed."""
    if allow_errors:
        ET.SubElement(case, "skipped", {"message": xml_text(f"{kind}: {message}")}).text = text
    else:
        ET.SubElement(case, "error", {"type": kind, "message": xml_text(message)}).text = text


def junit_case(
    line: Mapping[str, Any],
    thresholds: Mapping[str, float],
    classname: str = "assay",
    allow_errors: bool = False,
) -> ET.Element:
    """The `<testcase>` for one output line.

    line: one output line.
    thresholds: per scorer, the score its mean must reach; a row below it says so in its text.
    classname: the test case's class name (CI tools group cases by it).
    allow_errors: a row that was rejected or errored is skipped rather than an error.
    The element's text holds the instruction breakdown. A row is never a failure on its own:
    gates are on mean scores, and each gate has its own case (`gate_case`).
    """
    case = ET.Element("testcase", {"classname": classname, "name": xml_text(_case_name(line))})
    rejected = line.get("error")
    if isinstance(rejected, Mapping):
        message = f"{rejected.get('field', '?')}: {rejected.get('message', '')}"
        kind = str(rejected.get("kind") or "invalid_row")
        text = xml_text(f"row {line.get('row')} was not scored: {message}")
        junit_problem(case, kind, message, text, allow_errors)
        return case
    errored, report = [], []
    for name, result in scorer_results(line):
        report.append(describe_result(name, result, thresholds.get(name)))
        if result.get("error") is True:
            errored.append(
                (str(result.get("kind", "error")), f"{name}: {result.get('message', '')}")
            )
    text = xml_text("\n\n".join(report))
    if errored:
        kinds = ",".join(sorted({kind for kind, _ in errored}))
        junit_problem(case, kinds, "; ".join(message for _, message in errored), text, allow_errors)
    else:
        ET.SubElement(case, "system-out").text = text
    return case


def gate_case(gate: GateCase, classname: str) -> ET.Element:
    """The `<testcase>` for one gate: a failure when the gate failed."""
    case = ET.Element("testcase", {"classname": classname, "name": xml_text(gate.name)})
    if gate.failure is not None:
        ET.SubElement(
            case, "failure", {"type": "gate_failed", "message": xml_text(gate.failure)}
        ).text = xml_text(gate.failure)
    return case


def _unique_names(cases: Iterable[tuple[Mapping[str, Any], ET.Element]]) -> Iterator[ET.Element]:
    """The row cases, a repeated id named with its row too ("t-006 (row 9)"): CI tools merge
    cases of one name."""
    seen: set[str] = set()
    for line, case in cases:
        name = case.get("name", "")
        if name in seen:
            case.set("name", f"{name} (row {line.get('row')})")
        seen.add(name)
        yield case


def write_junit(
    lines: Iterable[Mapping[str, Any]],
    path: Path | str,
    thresholds: Mapping[str, float],
    suite_name: str = "assay",
    gates: Sequence[GateCase] = (),
    allow_errors: bool = False,
) -> JunitCounts:
    """Write JUnit XML with one test case per output line (see `junit_case`), then one per gate
    (see `gate_case`), to `path`.

    lines: the run's output lines, in row order; read once, as a stream.
    path: the XML file to write; it appears complete or not at all (written aside, then moved).
    thresholds: from `parse_fail_under` (may be empty), named in the rows' text.
    suite_name: the test suite's name and the row cases' class name (gates: `<suite>.gates`).
    gates: the command's gates and how they ended.
    allow_errors: errored rows are skipped cases instead of errors.
    Returns the counts written in the suite's attributes.
    """
    path = Path(path)  # a str too
    counts = JunitCounts()
    path.parent.mkdir(parents=True, exist_ok=True)
    # Test cases go to a scratch file first: the suite's opening tag needs the totals, and
    # holding a large run's cases in memory would make memory grow with the output.
    with tempfile.TemporaryFile("w+", encoding="utf-8") as cases:
        row_cases = _unique_names(
            (line, junit_case(line, thresholds, suite_name, allow_errors)) for line in lines
        )
        gate_cases = (gate_case(gate, f"{suite_name}.gates") for gate in gates)
        for case in itertools.chain(row_cases, gate_cases):
            counts.tests += 1
            counts.failures += case.find("failure") is not None
            counts.errors += case.find("error") is not None
            counts.skipped += case.find("skipped") is not None
            cases.write(ET.tostring(case, encoding="unicode"))
            cases.write("\n")
        cases.seek(0)
        attributes = {
            "name": suite_name,
            "tests": str(counts.tests),
            "failures": str(counts.failures),
            "errors": str(counts.errors),
            "skipped": str(counts.skipped),
        }
        opening = ET.tostring(ET.Element("testsuite", attributes), encoding="unicode")
        partial = path.with_name(path.name + ".partial")
        with partial.open("w", encoding="utf-8") as out:
            out.write('<?xml version="1.0" encoding="utf-8"?>\n')
            out.write(opening.replace(" />", ">").replace("/>", ">") + "\n")
            for chunk in iter(lambda: cases.read(1 << 16), ""):
                out.write(chunk)
            out.write("</testsuite>\n")
        os.replace(partial, path)
    return counts
