"""Fold a run's output lines into what the report shows, one line at a time.

An output line is `{"row", "id"?, <passthrough columns>, <name>: result, ...}`. Any key whose
value is an object with a numeric `score` is a scored result (a detector today, a metric such as
`llm.ood_detection` later), so new scorers appear in the report without changes here. An object
with `"error": true` is that scorer's failure on the row; a top-level `"error"` object means the
row was not scored (rejected before scoring, or it timed out or failed as a whole). Only tallies
and a handful of example rows are kept, so memory stays flat however long the output is.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from assay.runner.gates import GateFigures
from assay.runner.output import is_scorer_error, scorer_results
from assay.runner.rows import INVALID_ROW
from assay.stats import UNIT_SCALE, ScoreScale

if TYPE_CHECKING:
    from assay.metrics.ood.summary import OODTally

#: Gold-label columns looked for, in order, when no `--label-column` is given.
DEFAULT_LABEL_COLUMNS = ("label", "gold", "gold_label")
#: How many lowest-scoring rows the report lists per scorer.
WORST_ROWS = 5
#: Accepted spellings of a gold label (compared lower-cased and stripped).
_TRUE_WORDS = frozenset({"true", "yes", "y", "1", "pass", "passed", "good", "positive"})
_FALSE_WORDS = frozenset({"false", "no", "n", "0", "fail", "failed", "bad", "negative"})


def read_gold_label(value: Any) -> bool | None:
    """A gold label as a bool (True = the response is good); None when it cannot be read.

    value: a bool, 0/1, or a word such as true/false, yes/no, pass/fail, good/bad.
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        word = value.strip().lower()
        if word in _TRUE_WORDS:
            return True
        if word in _FALSE_WORDS:
            return False
    return None


@dataclass
class InstructionTally:
    """One instruction's counts over a scorer's rows.

    answered: rows where the instruction was judged.
    failed: rows where its label was false.
    probability_total: sum of its follow_probability (for the mean).
    """

    answered: int = 0
    failed: int = 0
    probability_total: float = 0.0

    @property
    def failure_rate(self) -> float:
        return self.failed / self.answered if self.answered else 0.0

    @property
    def mean_probability(self) -> float:
        return self.probability_total / self.answered if self.answered else 0.0


@dataclass(frozen=True)
class Verdict:
    """One instruction's verdict on a listed row."""

    instruction: str
    follow_probability: float
    label: bool
    explanation: str


@dataclass(frozen=True)
class RowText:
    """The text a row was scored on (what output lines carry; empty for older outputs)."""

    user_query: str | None = None
    generated_text: str | None = None
    context: tuple[str, ...] = ()

    @classmethod
    def of(cls, line: Mapping[str, Any]) -> RowText:
        context = line.get("context")
        documents = [context] if isinstance(context, str) else context
        query, response = line.get("user_query"), line.get("generated_text")
        if query is None and response is None:
            query, response = _case_text(line)
        return cls(
            query if isinstance(query, str) else None,
            response if isinstance(response, str) else None,
            tuple(d for d in documents or () if isinstance(d, str)),
        )


def _case_text(line: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """A metric line's text (`llm.ood_detection` keeps no query or response of its own): the
    in-domain question, and the cases it got wrong, each with the question and the reply."""
    for _, result in scorer_results(line):
        cases = [c for c in result.get("cases") or [] if isinstance(c, Mapping)]
        if not cases:
            continue
        question = next((c.get("query") for c in cases if c.get("role") == "in_domain"), None)
        wrong = [
            f"{c.get('kind')} {c.get('label') or c.get('status')}: "
            f"{c.get('query')!r} -> {c.get('reply') or c.get('error')!r}"
            for c in cases
            if c.get("correct") is not True
        ]
        return question, "\n".join(wrong) or f"all {len(cases)} cases judged right"
    return None, None


@dataclass(frozen=True)
class ExampleRow:
    """A low-scoring row kept for the report: where it is, its text and every verdict.

    failed: (instruction, follow_probability, explanation) for each instruction labelled false.
    verdicts: every instruction's verdict, in rubric order.
    """

    score: float
    row: Any
    row_id: Any
    failed: tuple[tuple[str, float, str], ...]
    text: RowText = RowText()
    verdicts: tuple[Verdict, ...] = ()


@dataclass
class ScorerTally:
    """Everything the report needs about one detector or metric.

    scores: score (rounded to 4 places) -> rows with it.
    positive / negative: the same, for rows whose gold label is true / false.
    errors: error kind -> rows where this scorer failed.
    instructions: instruction text -> its counts, in the order first seen.
    ood: for a metric whose results carry judged `cases` (llm.ood_detection), its own tally:
        the 4-way table, error rates and failing cases.
    scale: the range the scores run over, and whether higher is worse (`"inverted": true`: an
        error rate), as the first scored result says.
    """

    name: str
    scores: Counter[float] = field(default_factory=Counter)
    positive: Counter[float] = field(default_factory=Counter)
    negative: Counter[float] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    instructions: dict[str, InstructionTally] = field(default_factory=dict)
    ood: OODTally | None = None
    scale: ScoreScale = UNIT_SCALE
    # Bounded heap of the worst-scoring rows (the lowest; the highest for an error rate) as
    # (-badness, -row order, example), badness = `scale.worse_first(score)`: its top is the
    # entry to drop first, the best score and, among equal scores, the latest row.
    _lowest: list[tuple[float, int, ExampleRow]] = field(default_factory=list)

    @property
    def rows_scored(self) -> int:
        return sum(self.scores.values())

    @property
    def rows_errored(self) -> int:
        return sum(self.errors.values())

    @property
    def inverted(self) -> bool:
        """Whether the scores are an error rate (higher is worse)."""
        return self.scale.inverted

    def lowest_rows(self) -> list[ExampleRow]:
        """The kept worst-scoring rows, worst first (earlier rows first on ties): the lowest
        scores, or the highest for an error rate."""
        return [entry[2] for entry in sorted(self._lowest, key=lambda e: (-e[0], -e[1]))]

    def add(self, result: Mapping[str, Any], gold: bool | None, line: Mapping[str, Any]) -> None:
        """Count one row's result; `gold` is its gold label, if it has one; `line` the output
        line it is in (for the row's number, id and text, should it be listed)."""
        score = round(float(result["score"]), 4)
        if not self.scores:
            self.scale = ScoreScale.of(result)
        self.scores[score] += 1
        if gold is not None:
            (self.positive if gold else self.negative)[score] += 1
        verdicts = []
        for entry in result.get("instructions_list") or []:
            text = str(entry.get("instruction", ""))
            probability = float(entry.get("follow_probability", 0.0))
            tally = self.instructions.setdefault(text, InstructionTally())
            tally.answered += 1
            tally.probability_total += probability
            label = bool(entry.get("label"))
            tally.failed += not label
            verdicts.append(Verdict(text, probability, label, str(entry.get("explanation", ""))))
        if self._is_low(score):
            failed = tuple(
                (v.instruction, v.follow_probability, v.explanation)
                for v in verdicts
                if not v.label
            )
            row, row_id = line.get("row"), line.get("id")
            example = ExampleRow(score, row, row_id, failed, RowText.of(line), tuple(verdicts))
            self._keep(example)

    def _is_low(self, score: float) -> bool:
        # Cheap test first, so the row's text is copied only when it will be kept.
        badness = self.scale.worse_first(score)
        return len(self._lowest) < WORST_ROWS or (-badness, -self.rows_scored) > self._lowest[0][:2]

    def _keep(self, example: ExampleRow) -> None:
        key = (-self.scale.worse_first(example.score), -self.rows_scored, example)
        if len(self._lowest) < WORST_ROWS:
            heapq.heappush(self._lowest, key)
        else:
            heapq.heapreplace(self._lowest, key)


@dataclass(frozen=True)
class RejectedRow:
    """A row rejected before scoring: where it is, the field at fault and why."""

    row: Any
    row_id: Any
    field: str
    message: str


@dataclass
class RunTally:
    """A whole output file, folded.

    label_column: the gold-label column asked for (`--label-column`); None to look for
        `DEFAULT_LABEL_COLUMNS`.
    rows: output lines seen.
    rejected: field -> rows rejected before scoring because of it.
    rejected_examples: the first few rejected rows.
    scorers: per detector or metric, in the order first seen.
    gold_column: the label column actually found (None if no row had one).
    labelled_results: scored results paired with a readable gold label.
    unreadable_labels: gold labels that are not a yes/no value (left out of AUROC): a row's
        label counts once, whatever number of scorers it is for; a per-scorer map's, each.
    unreadable_example: the first such value, for the message.
    rows_with_errors: rows rejected or with any scorer's error (what `--allow-errors` allows).
    """

    label_column: str | None = None
    rows: int = 0
    rejected: Counter[str] = field(default_factory=Counter)
    rejected_examples: list[RejectedRow] = field(default_factory=list)
    scorers: dict[str, ScorerTally] = field(default_factory=dict)
    gold_column: str | None = None
    labelled_results: int = 0
    unreadable_labels: int = 0
    unreadable_example: str | None = None
    rows_with_errors: int = 0

    @property
    def rows_rejected(self) -> int:
        return sum(self.rejected.values())

    def gate_figures(self) -> dict[str, GateFigures]:
        """What `--fail-under` checks per scorer (see `gates.GateFigures`): every row it did
        not score (its errors, rejected rows, rows without its inputs) is unscored."""
        return {
            name: GateFigures(
                sum(v * n for v, n in s.scores.items()),
                s.rows_scored,
                self.rows - s.rows_scored,
                floor=s.scale.low,
            )
            for name, s in self.scorers.items()
        }

    def means(self) -> dict[str, float | None]:
        """Mean score per scorer (None when every row of it errored): what gates check."""
        return {
            name: (
                sum(v * n for v, n in s.scores.items()) / s.rows_scored if s.rows_scored else None
            )
            for name, s in self.scorers.items()
        }

    def add_line(self, line: Mapping[str, Any]) -> None:
        """Count one output line."""
        self.rows += 1
        error = line.get("error")
        if isinstance(error, Mapping):
            self.rows_with_errors += 1
            field_name = str(error.get("field", "?"))
            kind = error.get("kind")
            if kind not in (None, INVALID_ROW):  # scored but failed: a timeout, a judge error
                field_name = f"{field_name}: {kind}"
            self.rejected[field_name] += 1
            if len(self.rejected_examples) < WORST_ROWS:
                message = str(error.get("message", ""))
                self.rejected_examples.append(
                    RejectedRow(line.get("row"), line.get("id"), field_name, message)
                )
            return
        gold_value = self._gold_value(line)
        errored = False
        unreadable: set[str | None] = set()  # scorers whose label could not be read
        for name, value in scorer_results(line):
            if "cases" in value:
                _ood_tally(self.scorers.setdefault(name, ScorerTally(name))).add(
                    value, line.get("id")
                )
            if is_scorer_error(value):
                errored = True
                tally = self.scorers.setdefault(name, ScorerTally(name))
                tally.errors[str(value.get("kind", "error"))] += 1
            else:
                gold = self._gold_for(gold_value, name, unreadable)
                self.scorers.setdefault(name, ScorerTally(name)).add(value, gold, line)
        self.rows_with_errors += errored
        self.unreadable_labels += len(unreadable)

    def _gold_value(self, line: Mapping[str, Any]) -> Any:
        names = (self.label_column,) if self.label_column else DEFAULT_LABEL_COLUMNS
        for name in names:
            if name in line and line[name] is not None:
                self.gold_column = name
                return line[name]
        return None

    def _gold_for(self, value: Any, scorer: str, unreadable: set[str | None]) -> bool | None:
        """The row's gold label for `scorer`: one label for every scorer, or a per-scorer map.
        A label that is not yes/no adds to `unreadable` the scorer it is for (None: all)."""
        if value is None:
            return None
        label_for: str | None = None
        if isinstance(value, Mapping):
            if scorer not in value:
                return None
            value, label_for = value[scorer], scorer
        gold = read_gold_label(value)
        if gold is None:
            unreadable.add(label_for)
            if self.unreadable_example is None:
                self.unreadable_example = repr(value)[:60]
        else:
            self.labelled_results += 1
        return gold


def _ood_tally(tally: ScorerTally) -> OODTally:
    if tally.ood is None:
        # Imported on first use: detector-only reports need none of the metric's modules.
        from assay.metrics.ood.summary import OODTally

        tally.ood = OODTally()
    return tally.ood


def collect(lines: Iterable[Mapping[str, Any]], label_column: str | None = None) -> RunTally:
    """Fold every output line into a RunTally.

    lines: a run's output lines (see `assay.runner.output.iter_output_lines`).
    label_column: the gold-label column; None looks for `label`, `gold` or `gold_label`.
    """
    tally = RunTally(label_column=label_column)
    for line in lines:
        if not isinstance(line, Mapping):  # a file's text lines: an AttributeError deep inside
            raise TypeError(
                f"collect() takes parsed output lines (dicts), got {type(line).__name__}: read "
                "the file with assay.runner.output.iter_output_lines(path)"
            )
        tally.add_line(line)
    return tally
