"""Roll scored output lines up into a run summary.

The summary is a fold over output lines only (`RunSummary.add_line`), so the same numbers come out
whether a run is summarised as it goes or rebuilt afterwards from its output file. A detector
that returned an error object counts as an errored row, never as a score of 0.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from assay.detectors import DETECTORS
from assay.judges.usage import Usage

#: A row "passes" a detector when its score is at least this.
PASS_THRESHOLD = 0.7
#: How many failed rows the summary lists individually (all of them are counted).
MAX_LISTED_FAILURES = 50


def _ratio(part: float, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


@dataclass
class DetectorSummary:
    """One detector's numbers over a run.

    rows_scored: rows with a result (errored rows excluded).
    rows_errored: rows where the detector returned an error object instead of a result.
    score_total: sum of scores over scored rows.
    rows_passing: scored rows with score >= PASS_THRESHOLD.
    followed / answered: per instruction (short form, e.g. "core_intent"), how many scored rows
        had label true / had the instruction at all.
    """

    name: str
    rows_scored: int = 0
    rows_errored: int = 0
    score_total: float = 0.0
    rows_passing: int = 0
    followed: dict[str, int] = field(default_factory=dict)
    answered: dict[str, int] = field(default_factory=dict)

    def add(self, result: Mapping[str, Any]) -> None:
        """Count one row's wire result (a DetectorResult or DetectorError as JSON)."""
        if result.get("error") is True:
            self.rows_errored += 1
            return
        score = float(result["score"])
        self.rows_scored += 1
        self.score_total += score
        self.rows_passing += score >= PASS_THRESHOLD
        short_forms = _short_forms(self.name)
        for entry in result.get("instructions_list", []):
            check = short_forms.get(entry["instruction"], entry["instruction"])
            self.answered[check] = self.answered.get(check, 0) + 1
            self.followed[check] = self.followed.get(check, 0) + bool(entry["label"])

    @property
    def mean_score(self) -> float | None:
        return _ratio(self.score_total, self.rows_scored)

    @property
    def share_passing(self) -> float | None:
        return _ratio(self.rows_passing, self.rows_scored)

    def instruction_pass_rates(self) -> dict[str, float | None]:
        """Share of scored rows that followed each instruction, in rubric order."""
        return {
            check: _ratio(self.followed.get(check, 0), answered)
            for check, answered in self.answered.items()
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "rows_scored": self.rows_scored,
            "rows_errored": self.rows_errored,
            "mean_score": self.mean_score,
            "share_passing": self.share_passing,
            "instruction_pass_rates": self.instruction_pass_rates(),
        }


@dataclass
class RunSummary:
    """A whole run's numbers.

    rows: output lines seen (one per input row).
    rows_failed: rows rejected before scoring (unreadable or invalid), each with an `error`.
    failures: the first MAX_LISTED_FAILURES rejected rows as {row, id, field, message}.
    detectors: per detector, in the order first seen.
    input_path / output_path / summary_path: where the run read and wrote, when known.
    usage: LLM calls, tokens, cache hits, votes and cascade escalations over the run (each
        line's `usage`); rows_with_calls: rows that made at least one LLM call.
    """

    rows: int = 0
    rows_failed: int = 0
    failures: list[dict[str, Any]] = field(default_factory=list)
    detectors: dict[str, DetectorSummary] = field(default_factory=dict)
    input_path: str | None = None
    output_path: str | None = None
    summary_path: str | None = None
    usage: Usage = field(default_factory=Usage)
    rows_with_calls: int = 0

    def add_line(self, line: Mapping[str, Any]) -> None:
        """Count one output line (`{"row", "id"?, ..., detector: result}` or `{..., "error"}`)."""
        self.rows += 1
        usage = line.get("usage")
        if isinstance(usage, Mapping):
            row_usage = Usage.from_dict(dict(usage))
            self.usage.add(row_usage)
            self.rows_with_calls += row_usage.calls > 0
        error = line.get("error")
        if isinstance(error, Mapping):
            self.rows_failed += 1
            if len(self.failures) < MAX_LISTED_FAILURES:
                self.failures.append({"row": line.get("row"), "id": line.get("id"), **dict(error)})
            return
        for name in DETECTORS:
            result = line.get(name)
            if isinstance(result, Mapping):
                self.detectors.setdefault(name, DetectorSummary(name)).add(result)

    def add_lines(self, lines: Iterable[Mapping[str, Any]]) -> None:
        for line in lines:
            self.add_line(line)

    def to_dict(self) -> dict[str, Any]:
        return {
            "input": self.input_path,
            "output": self.output_path,
            "rows": self.rows,
            "rows_failed": self.rows_failed,
            "pass_threshold": PASS_THRESHOLD,
            "detectors": {name: d.to_dict() for name, d in self.detectors.items()},
            "failures": self.failures,
            "llm": {
                **self.usage.to_dict(),
                "rows_with_calls": self.rows_with_calls,
                "calls_per_row": _ratio(self.usage.calls, self.rows),
                "tokens_per_row": _ratio(
                    self.usage.prompt_tokens + self.usage.completion_tokens, self.rows
                ),
            },
        }


def _short_forms(detector: str) -> dict[str, str]:
    """Instruction text -> the detector's short id for it (e.g. "core_intent")."""
    found = DETECTORS.get(detector)
    return {i.text: i.check for i in found.instructions} if found else {}
