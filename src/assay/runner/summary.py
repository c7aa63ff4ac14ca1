"""Roll scored output lines up into a run summary.

The summary is a fold over output lines only (`RunSummary.add_line`), so the same numbers come out
whether a run is summarised as it goes or rebuilt afterwards from its output file. A detector
that returned an error object counts as an errored row, never as a score of 0.

Per detector or metric it gives: rows scored and errored, mean score with a bootstrap 95%
interval, share passing, a histogram over ten score bands, the pass rate of each instruction and
error counts by kind.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from assay.detectors import DETECTORS
from assay.judges.embedded.embedding_cache import CacheStats
from assay.judges.usage import Usage
from assay.runner.gates import GateFigures

if TYPE_CHECKING:
    from assay.metrics.ood.summary import OODTally
from assay.stats import UNIT_SCALE, ScoreScale, histogram, mean_interval

#: A row "passes" a detector when its score is at least this (on [0, 1]; a rescaled metric's
#: pass mark lies the same share of the way through its range).
PASS_THRESHOLD = 0.7
#: The metric whose results also get its own summary (4-way confusion, error rates).
OOD_METRIC = "llm.ood_detection"
#: How many failed rows the summary lists individually (all of them are counted).
MAX_LISTED_FAILURES = 50
#: Score bands of the histogram: [0, 0.1), [0.1, 0.2), ... [0.9, 1.0].
SCORE_BANDS = 10


def _ratio(part: float, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


@dataclass
class DetectorSummary:
    """One detector's numbers over a run.

    rows_scored: rows with a result (errored rows excluded).
    rows_errored: rows where the detector returned an error object instead of a result.
    score_total: sum of scores over scored rows.
    rows_passing: scored rows with score >= PASS_THRESHOLD (on the scorer's range; for an
        error rate, at most the mark as far from the worst score: `ScoreScale.passes`).
    followed / answered: per instruction (short form, e.g. "core_intent"), how many scored rows
        had label true / had the instruction at all.
    errors_by_kind: errored rows per error kind (e.g. "timeout", "transport").
    score_tally: distinct score -> rows with it (for the bootstrap interval; its size does not
        grow with the rows, since scores are rounded).
    scale: the range the scores run over, as the first scored result says (`ScoreScale.of`).
    """

    name: str
    rows_scored: int = 0
    rows_errored: int = 0
    score_total: float = 0.0
    rows_passing: int = 0
    followed: dict[str, int] = field(default_factory=dict)
    answered: dict[str, int] = field(default_factory=dict)
    errors_by_kind: dict[str, int] = field(default_factory=dict)
    metric_tally: OODTally | None = None  # only for llm.ood_detection
    score_tally: dict[float, int] = field(default_factory=dict)
    scale: ScoreScale = UNIT_SCALE

    def add(self, result: Mapping[str, Any]) -> None:
        """Count one row's wire result (a DetectorResult or DetectorError as JSON)."""
        if self.metric_tally is not None:
            self.metric_tally.add(result)
        if result.get("error") is True:
            self.rows_errored += 1
            kind = str(result.get("kind", "error"))
            self.errors_by_kind[kind] = self.errors_by_kind.get(kind, 0) + 1
            return
        score = float(result["score"])
        if not self.rows_scored:
            self.scale = ScoreScale.of(result)
        self.rows_scored += 1
        self.score_total += score
        self.rows_passing += self.scale.passes(score, PASS_THRESHOLD)
        self.score_tally[score] = self.score_tally.get(score, 0) + 1
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

    def _edge(self, band: int) -> str:
        return self.scale.label(self.scale.at(band / SCORE_BANDS))

    def instruction_pass_rates(self) -> dict[str, float | None]:
        """Share of scored rows that followed each instruction, in rubric order."""
        return {
            check: _ratio(self.followed.get(check, 0), answered)
            for check, answered in self.answered.items()
        }

    def to_dict(self) -> dict[str, Any]:
        interval = mean_interval(self.score_tally)
        return {
            "rows_scored": self.rows_scored,
            "rows_errored": self.rows_errored,
            "mean_score": self.mean_score,
            "mean_score_ci95": [round(interval.low, 4), round(interval.high, 4)]
            if interval
            else None,
            "share_passing": self.share_passing,
            # what share_passing counts: score >= this, or <= it for an error rate (`inverted`)
            "pass_mark": round(self.scale.pass_mark(PASS_THRESHOLD), 4),
            "score_histogram": {
                f"{self._edge(band)}-{self._edge(band + 1)}": count
                for band, count in enumerate(histogram(self.score_tally, SCORE_BANDS, self.scale))
            },
            "instruction_pass_rates": self.instruction_pass_rates(),
            "errors_by_kind": dict(self.errors_by_kind),
            **({"ood": self.metric_tally.to_dict()} if self.metric_tally else {}),
        }


@dataclass
class RunSummary:
    """A whole run's numbers.

    names: output keys that hold detector or metric results (default: every detector).
    rows: output lines seen (one per input row).
    rows_failed: rows with no scores at all (unreadable, invalid or timed out), each with an
        `error`.
    failures: the first MAX_LISTED_FAILURES failed rows as {row, id, field, kind, message}:
        rows with no scores, and rows where a detector or metric errored (field = its name).
        All of them can be rescored with `--retry-failed`.
    failures_by_kind: rows_failed split by error kind.
    detectors: per detector or metric, in the order first seen.
    input_path / output_path / summary_path: where the run read and wrote, when known.
    usage: LLM calls, probe calls, tokens, cache hits, votes, cascade escalations and written
        answers that disagreed with their probability, over the run (each line's `usage`);
        rows_with_calls: rows that made at least one LLM call.
    rows_with_errors: rows with any failure: rejected, timed out, or a scorer errored on them
        (what `--allow-errors` is about).
    fingerprint: the run's fingerprint (input and options), written into the summary file so
        the same command run again knows the output already holds it.
    settings: the fingerprint of the options alone, which `--retry-failed` must match.
    already_complete: the run had finished before; nothing was scored this time.
    embedding_cache: texts the embedding cache answered (hits) and the encoder had to encode
        (misses) while this invocation scored; it describes the process, not the output, so
        a resumed run counts only what it scored itself.
    """

    names: tuple[str, ...] = tuple(DETECTORS)
    rows: int = 0
    rows_failed: int = 0
    failures: list[dict[str, Any]] = field(default_factory=list)
    failures_by_kind: dict[str, int] = field(default_factory=dict)
    detectors: dict[str, DetectorSummary] = field(default_factory=dict)
    input_path: str | None = None
    output_path: str | None = None
    summary_path: str | None = None
    usage: Usage = field(default_factory=Usage)
    rows_with_calls: int = 0
    rows_with_errors: int = 0
    fingerprint: str | None = None
    settings: str | None = None
    already_complete: bool = False
    embedding_cache: CacheStats = field(default_factory=CacheStats)

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
            self.rows_with_errors += 1
            kind = str(error.get("kind", "invalid_row"))
            self.failures_by_kind[kind] = self.failures_by_kind.get(kind, 0) + 1
            self._list_failure(line, error)
            return
        errored = False
        for name in self.names:
            result = line.get(name)
            if isinstance(result, Mapping):
                if name not in self.detectors:
                    tally = _ood_tally() if name == OOD_METRIC else None
                    self.detectors[name] = DetectorSummary(name, metric_tally=tally)
                self.detectors[name].add(result)
                if result.get("error") is True:
                    errored = True
                    self._list_failure(line, {"field": name, **_error_fields(result)})
        self.rows_with_errors += errored

    def _list_failure(self, line: Mapping[str, Any], error: Mapping[str, Any]) -> None:
        if len(self.failures) < MAX_LISTED_FAILURES:
            self.failures.append({"row": line.get("row"), "id": line.get("id"), **dict(error)})

    def unrounded_means(self) -> dict[str, float | None]:
        """Mean score per detector or metric, unrounded; None if none scored."""
        return {
            name: d.score_total / d.rows_scored if d.rows_scored else None
            for name, d in self.detectors.items()
        }

    def gate_figures(self) -> dict[str, GateFigures]:
        """What `--fail-under` checks per scorer: its scores, and the rows it could not score
        (its own errors, rows rejected before any scorer ran, and rows without its inputs,
        which a run that names no detectors scores with the others alone)."""
        return {
            name: GateFigures(
                d.score_total, d.rows_scored, self.rows - d.rows_scored, floor=d.scale.low
            )
            for name, d in self.detectors.items()
        }

    @property
    def rows_unscored(self) -> bool:
        """True when there were rows and every one was rejected before scoring: the input,
        not the judge, is at fault."""
        return (
            bool(self.rows)
            and self.rows_failed == self.rows
            and all(kind == "invalid_row" for kind in self.failures_by_kind)
        )

    def to_pandas(self) -> Any:
        """The run's output as a `pandas.DataFrame`, one row per input row: `row`, `id`, the
        scored text, passed-through columns, `error`, and per scorer `<name>.score`,
        `<name>.error` and `<name>.<check>` (instruction probabilities). Needs pandas
        (`pip install 'assay[pandas]'`)."""
        from assay.frames import lines_frame
        from assay.runner.output import iter_output_lines

        if self.output_path is None:
            raise ValueError("this summary was not made from an output file")
        return lines_frame(iter_output_lines(Path(self.output_path)))

    def add_lines(self, lines: Iterable[Mapping[str, Any]]) -> None:
        for line in lines:
            self.add_line(line)

    def to_dict(self) -> dict[str, Any]:
        scorers = {name: d.to_dict() for name, d in self.detectors.items()}
        return {
            "input": self.input_path,
            "output": self.output_path,
            "fingerprint": self.fingerprint,
            "settings": self.settings,
            "rows": self.rows,
            "rows_failed": self.rows_failed,
            "rows_with_errors": self.rows_with_errors,
            "failures_by_kind": dict(self.failures_by_kind),
            "pass_threshold": PASS_THRESHOLD,
            "scorers": scorers,
            # The same figures under the name they had before "scorer" was the one word for
            # "detector or metric"; kept so that readers of older summaries still work.
            "detectors": scorers,
            "failures": self.failures,
            "llm": {
                **self.usage.to_dict(),
                "rows_with_calls": self.rows_with_calls,
                "calls_per_row": _ratio(self.usage.calls, self.rows),
                "tokens_per_row": _ratio(
                    self.usage.prompt_tokens + self.usage.completion_tokens, self.rows
                ),
            },
            "embedding_cache": self.embedding_cache.counts(),
        }


@cache  # called for every row of a run
def _short_forms(detector: str) -> dict[str, str]:
    """Instruction text -> the detector's short id for it (e.g. "core_intent")."""
    found = DETECTORS.get(detector)
    return {i.text: i.check for i in found.instructions} if found else {}


def _ood_tally() -> OODTally:
    # Imported on first use: the metric's modules are not needed for detector-only runs.
    from assay.metrics.ood.summary import OODTally

    return OODTally()


def _error_fields(result: Mapping[str, Any]) -> dict[str, Any]:
    return {"kind": result.get("kind", "error"), "message": result.get("message", "")}
