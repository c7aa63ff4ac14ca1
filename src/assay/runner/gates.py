"""CI gates over a run's output: `--fail-under NAME=THRESHOLD` and JUnit XML.

`parse_fail_under` turns the flag's values into thresholds, `check_fail_under` compares mean
scores with them, and `write_junit` writes one JUnit test case per output line, failed when a
gated score is below its threshold and errored when the row or one of its scorers failed.
Scorers are found generically: any key of an output line whose value has a numeric `score`
(a detector or a metric), or `{"error": true, ...}` for one that failed on the row.
"""

from __future__ import annotations

import math
import os
import re
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from assay.runner.output import scorer_results
from assay.schema import RequestValidationError

FAIL_UNDER_FLAG = "--fail-under"
#: Means this close below a threshold still pass: they differ from it only by float rounding.
_TOLERANCE = 1e-9
#: Characters XML 1.0 cannot carry, even escaped; they are dropped from JUnit text.
_XML_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def parse_fail_under(
    specs: Iterable[str], known: Iterable[str] | None = None, flag: str = FAIL_UNDER_FLAG
) -> dict[str, float]:
    """Parse `NAME=THRESHOLD` values of a repeatable flag into {name: threshold}.

    specs: the flag's values, e.g. ["output_relevance=0.7", "completeness=0.6"].
    known: detector and metric names that may be gated; None accepts any name (a name the
        output turns out not to have is then reported by `check_fail_under`).
    flag: the flag's spelling, used in error messages.
    Raises RequestValidationError(flag, ...) naming the bad value and what is wrong with it.
    """
    allowed = None if known is None else sorted(known)
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
        if not math.isfinite(threshold) or not 0.0 <= threshold <= 1.0:
            raise RequestValidationError(
                flag, f"{spec!r}: threshold {number} is outside 0 to 1 (scores run from 0 to 1)"
            )
        if allowed is not None and name not in allowed:
            raise RequestValidationError(
                flag, f"{spec!r}: unknown detector or metric {name!r}; known: {', '.join(allowed)}"
            )
        if name in thresholds:
            raise RequestValidationError(flag, f"{name!r} is given twice")
        thresholds[name] = threshold
    return thresholds


def check_fail_under(
    means: Mapping[str, float | None],
    thresholds: Mapping[str, float],
    flag: str = FAIL_UNDER_FLAG,
) -> list[str]:
    """One message per gate that fails; an empty list means every gate passed.

    means: mean score per detector or metric over the run (None when every row of it errored).
    thresholds: from `parse_fail_under`.
    flag: the flag's spelling, used in the messages.
    A gated name the run never scored fails too: a gate that cannot be checked must not pass.
    """
    messages = []
    scored = ", ".join(means) or "nothing"
    for name, threshold in thresholds.items():
        if name not in means:
            messages.append(
                f"{flag} {name}={threshold:g}: the output has no {name!r} results "
                f"(it has: {scored})"
            )
            continue
        mean = means[name]
        if mean is None:
            messages.append(f"{flag} {name}={threshold:g}: every row's {name} errored")
        elif mean < threshold - _TOLERANCE:
            messages.append(
                f"{name}: mean score {mean:.4f} is below {flag} threshold {threshold:g}"
            )
    return messages


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
        below = score < threshold - _TOLERANCE
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
    """What `write_junit` wrote: test cases, how many failed a threshold, how many errored."""

    tests: int = 0
    failures: int = 0
    errors: int = 0


def _clean(text: str) -> str:
    return _XML_ILLEGAL.sub("", text)


def _case_name(line: Mapping[str, Any]) -> str:
    row_id, row = line.get("id"), line.get("row")
    if row_id not in (None, ""):
        return str(row_id)
    return f"row {row}" if row is not None else "row"


def junit_case(
    line: Mapping[str, Any], thresholds: Mapping[str, float], classname: str = "assay"
) -> ET.Element:
    """The `<testcase>` for one output line.

    line: one output line.
    thresholds: per scorer, the score the row must reach (scorers not named are not gated).
    classname: the test case's class name (CI tools group cases by it).
    Errored when the row was rejected or a scorer failed on it; failed when a gated score is
    below its threshold; the element's text holds the instruction breakdown.
    """
    case = ET.Element("testcase", {"classname": classname, "name": _clean(_case_name(line))})
    rejected = line.get("error")
    if isinstance(rejected, Mapping):
        message = f"{rejected.get('field', '?')}: {rejected.get('message', '')}"
        kind = str(rejected.get("kind") or "invalid_row")
        ET.SubElement(case, "error", {"type": kind, "message": _clean(message)}).text = _clean(
            f"row {line.get('row')} was not scored: {message}"
        )
        return case
    errored, below, report = [], [], []
    for name, result in scorer_results(line):
        threshold = thresholds.get(name)
        report.append(describe_result(name, result, threshold))
        if result.get("error") is True:
            errored.append(
                (str(result.get("kind", "error")), f"{name}: {result.get('message', '')}")
            )
        elif threshold is not None and float(result["score"]) < threshold - _TOLERANCE:
            below.append(f"{name} {float(result['score']):.4g} < {threshold:g}")
    text = _clean("\n\n".join(report))
    if errored:
        kinds = sorted({kind for kind, _ in errored})
        message = "; ".join(message for _, message in errored)
        ET.SubElement(
            case, "error", {"type": ",".join(kinds), "message": _clean(message)}
        ).text = text
    elif below:
        attributes = {"type": "below_threshold", "message": "; ".join(below)}
        ET.SubElement(case, "failure", attributes).text = text
    else:
        ET.SubElement(case, "system-out").text = text
    return case


def write_junit(
    lines: Iterable[Mapping[str, Any]],
    path: Path,
    thresholds: Mapping[str, float],
    suite_name: str = "assay",
) -> JunitCounts:
    """Write JUnit XML with one test case per output line (see `junit_case`) to `path`.

    lines: the run's output lines, in row order; read once, as a stream.
    path: the XML file to write; it appears complete or not at all (written aside, then moved).
    thresholds: from `parse_fail_under` (may be empty: then only errored rows fail).
    suite_name: the test suite's name and the test cases' class name.
    Returns the counts written in the suite's attributes.
    """
    counts = JunitCounts()
    path.parent.mkdir(parents=True, exist_ok=True)
    # Test cases go to a scratch file first: the suite's opening tag needs the totals, and
    # holding a large run's cases in memory would make memory grow with the output.
    with tempfile.TemporaryFile("w+", encoding="utf-8") as cases:
        for line in lines:
            case = junit_case(line, thresholds, suite_name)
            counts.tests += 1
            counts.failures += case.find("failure") is not None
            counts.errors += case.find("error") is not None
            cases.write(ET.tostring(case, encoding="unicode"))
            cases.write("\n")
        cases.seek(0)
        attributes = {
            "name": suite_name,
            "tests": str(counts.tests),
            "failures": str(counts.failures),
            "errors": str(counts.errors),
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
