"""Compare two runs' outputs (`assay report BASELINE CANDIDATE`): what changed, and is it real.

Rows are paired by `id` when every baseline row has a distinct one, else by row number. For each
scorer the change in mean score is the mean of the paired differences (candidate minus
baseline), with a paired bootstrap 95% interval: the differences are resampled, not the two runs
separately, so the noise the two runs share cancels. The same is done per instruction with its
label (followed = 1). Rows whose score crossed the pass mark (the scorer's `--fail-under`
threshold, else the run summary's 0.7) are flips, listed with the text of both runs.

Memory holds one small record per baseline row (scores and instruction labels, no text); the
text of the listed flips is read in a second pass, and the bootstrap runs on tallies of the
differences, which sit on a 4-decimal grid.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from assay import stats
from assay.report.collect import RowText, Verdict
from assay.runner.output import scorer_results
from assay.runner.summary import PASS_THRESHOLD
from assay.schema import RequestValidationError
from assay.stats import ScoreScale

#: Flips listed per scorer and direction (all are counted).
LISTED_FLIPS = 10


@dataclass(frozen=True)
class Change:
    """A paired change in a mean: baseline and candidate means over the paired rows, their
    difference and its paired bootstrap 95% interval (None with fewer than two pairs)."""

    baseline: float
    candidate: float
    delta: float
    interval: stats.Interval | None

    @property
    def significant_drop(self) -> bool:
        """The whole interval lies below zero: the candidate is worse beyond the noise."""
        return self.interval is not None and self.delta < 0 and self.interval.high < 0


@dataclass(frozen=True)
class InstructionChange:
    """How often one instruction was followed, before and after, on the paired rows."""

    instruction: str
    pairs: int
    change: Change


@dataclass
class Flip:
    """A row whose score crossed the pass mark between the runs: its key (id, else row
    number), both scores, the candidate's text and verdicts, and the baseline's text."""

    key: str
    row: Any
    row_id: Any
    baseline_row: int
    baseline_score: float
    candidate_score: float
    candidate_text: RowText
    candidate_verdicts: tuple[Verdict, ...]
    baseline_text: RowText = field(default_factory=RowText)


@dataclass
class ScorerChange:
    """One scorer's comparison.

    pairs: rows scored in both runs; errored: rows paired but errored in either run.
    lost: of those, rows scored in the baseline that have no score in the candidate (it
        errored, was rejected, or the scorer was left out): a regression the means cannot show.
    pass_mark: the score a row must reach to pass (for flips); for an error rate (`inverted`),
        the score it must not exceed.
    regressed / improved: how many rows went from pass to fail / fail to pass, and the first
        `LISTED_FLIPS` of each.
    """

    name: str
    pass_mark: float
    pairs: int = 0
    errored: int = 0
    lost: int = 0
    change: Change | None = None
    instructions: list[InstructionChange] = field(default_factory=list)
    regressed: int = 0
    improved: int = 0
    regressed_rows: list[Flip] = field(default_factory=list)
    improved_rows: list[Flip] = field(default_factory=list)


@dataclass
class Comparison:
    """Two runs compared: their sources, how rows were paired, and per scorer what changed.

    only_baseline / only_candidate: rows that had no partner in the other run.
    repeated_ids: candidate rows whose id an earlier candidate row had (paired by id, they
        cannot be paired, so nothing says whether they got worse).
    """

    baseline_source: str
    candidate_source: str
    paired_by: str
    scorers: list[ScorerChange]
    only_baseline: int = 0
    only_candidate: int = 0
    repeated_ids: int = 0
    missing_ids: int = 0

    @property
    def pairing_problem(self) -> str | None:
        """Why some candidate rows could not be compared at all (a regression gate must not
        pass on rows it cannot pair), or None."""
        problems = []
        if self.repeated_ids:
            problems.append(
                f"{self.repeated_ids} rows of {self.candidate_source} repeat an id an earlier "
                "row of it has, so they cannot be paired with the baseline by id; give each "
                "row its own id (or none, to pair by row number)"
            )
        if self.missing_ids:
            problems.append(
                f"{self.missing_ids} rows of {self.candidate_source} have no id, but the "
                f"baseline's rows are paired by id; give them the baseline's ids"
            )
        if self.only_baseline:
            problems.append(
                f"{self.only_baseline} rows of {self.baseline_source} have no partner in "
                f"{self.candidate_source}, so nothing says whether they got worse"
            )
        return "; ".join(problems) or None

    def regressions(self) -> list[str]:
        """One message per scorer whose mean fell beyond the noise, that lost rows (scored
        before, not now) or that no row pairs up for (`--fail-on-regression`)."""
        messages = []
        for s in self.scorers:
            change = s.change
            if s.pairs == 0:  # a gate passes on no rows it could not compare
                messages.append(
                    f"{s.name}: no row is scored in both {self.baseline_source} and "
                    f"{self.candidate_source} (paired by {self.paired_by}); nothing to compare"
                )
            elif s.lost:
                messages.append(
                    f"{s.name}: {s.lost} rows scored in {self.baseline_source} have no score "
                    f"in {self.candidate_source} (errored, rejected, or the scorer left out)"
                )
            elif change is not None and change.interval is not None and change.significant_drop:
                low, high = change.interval.low, change.interval.high
                messages.append(
                    f"{s.name}: mean score fell by {-change.delta:.4f} against "
                    f"{self.baseline_source} (95% interval {low:+.4f} to {high:+.4f}, "
                    f"{s.pairs} paired rows)"
                )
        return messages


@dataclass
class _BaselineRow:
    scores: dict[str, tuple[float | None, dict[str, bool]]]


def _scores(line: Mapping[str, Any]) -> dict[str, tuple[float | None, dict[str, bool]]]:
    """Per scorer: its score (None when it errored) and each instruction's label."""
    found: dict[str, tuple[float | None, dict[str, bool]]] = {}
    for name, result in scorer_results(line):
        if result.get("error") is True:
            found[name] = (None, {})
            continue
        labels = {
            str(entry.get("instruction", "")): bool(entry.get("label"))
            for entry in result.get("instructions_list") or []
        }
        found[name] = (round(float(result["score"]), 4), labels)
    return found


def _verdicts(line: Mapping[str, Any], name: str) -> tuple[Verdict, ...]:
    result = line.get(name) or {}
    return tuple(
        Verdict(
            str(entry.get("instruction", "")),
            float(entry.get("follow_probability", 0.0)),
            bool(entry.get("label")),
            str(entry.get("explanation", "")),
        )
        for entry in result.get("instructions_list") or []
    )


class _Pairing:
    """Pairs candidate lines with baseline rows, by id when the baseline's ids allow it."""

    def __init__(self, baseline: Iterable[Mapping[str, Any]], source: str) -> None:
        self.rows: dict[int, _BaselineRow] = {}
        ids: dict[str, int] | None = {}
        for number, line in enumerate(baseline, start=1):
            if not isinstance(line.get("row"), int):  # an input file, not a run's output
                raise RequestValidationError(
                    "baseline",
                    f"line {number} of {source} has no row number: is it an input file? Give "
                    "the output `assay run` wrote for the earlier run",
                )
            row = int(line["row"])
            self.rows[row] = _BaselineRow(_scores(line))
            row_id = line.get("id")
            if ids is not None:
                if row_id in (None, "") or str(row_id) in ids:
                    ids = None
                else:
                    ids[str(row_id)] = row
        self.ids = ids
        self.paired_by = "id" if ids else "row"
        self.used: set[int] = set()
        self.candidate_ids: set[str] = set()
        self.repeated = 0
        self.without_id = 0

    def partner(self, line: Mapping[str, Any]) -> int | None:
        """The baseline row number paired with `line`, or None."""
        if self.ids:
            if line.get("id") in (None, ""):  # no id to pair it by ("None" is not one)
                self.without_id += 1
                return None
            row_id = str(line.get("id"))
            if row_id in self.candidate_ids:
                self.repeated += 1
                return None
            self.candidate_ids.add(row_id)
            row = self.ids.get(row_id)
        else:
            row = int(line["row"]) if int(line["row"]) in self.rows else None
        if row is None or row in self.used:
            return None
        self.used.add(row)
        return row


@dataclass
class _Tally:
    pass_mark: float
    inverted: bool = False  # an error rate: a row passes at or below the mark
    read_scale: bool = False  # pass_mark and inverted read from a result of the scorer
    lost: int = 0  # scored in the baseline, no score now
    differences: Counter[float] = field(default_factory=Counter)
    baseline_total: float = 0.0
    candidate_total: float = 0.0
    errored: int = 0
    labels: dict[str, Counter[float]] = field(default_factory=dict)
    label_totals: dict[str, list[int]] = field(default_factory=dict)
    regressed: list[Flip] = field(default_factory=list)
    improved: list[Flip] = field(default_factory=list)
    regressed_count: int = 0
    improved_count: int = 0


def _change(differences: Counter[float], baseline_total: float, candidate_total: float) -> Change:
    pairs = sum(differences.values())
    return Change(
        baseline=baseline_total / pairs,
        candidate=candidate_total / pairs,
        delta=(candidate_total - baseline_total) / pairs,
        interval=stats.mean_interval(differences),
    )


def compare(
    baseline: Iterable[Mapping[str, Any]],
    candidate: Iterable[Mapping[str, Any]],
    sources: tuple[str, str],
    thresholds: Mapping[str, float] | None = None,
    baseline_again: Iterable[Mapping[str, Any]] | None = None,
) -> Comparison:
    """Compare the candidate run's output lines with the baseline's.

    sources: the two outputs' paths, for the report.
    thresholds: per scorer, the pass mark for flips (its `--fail-under`; default 0.7).
    baseline_again: the baseline's lines read a second time, to fetch the listed flips' text
        (skipped when None).
    """
    pairing = _Pairing(baseline, sources[0])
    marks = dict(thresholds or {})
    tallies: dict[str, _Tally] = {}
    candidate_rows = 0
    for line in candidate:
        candidate_rows += 1
        partner = pairing.partner(line)
        if partner is None:
            continue
        before = pairing.rows[partner].scores
        now = _scores(line)
        for name in [name for name in before if name not in now]:  # in a stable order
            # Scored before, not now (the row was rejected, or the scorer was left out): a
            # row that cannot be compared, which a regression gate must not pass on.
            tally = _tally_for(tallies, name, None, marks)
            tally.errored += 1
            tally.lost += before[name][0] is not None
        for name, (score, labels) in now.items():
            if name not in before:
                continue
            tally = _tally_for(tallies, name, line[name], marks)
            old_score, old_labels = before[name]
            if score is None or old_score is None:
                tally.errored += 1
                tally.lost += old_score is not None
                continue
            _count(tally, line, name, partner, (old_score, score), (old_labels, labels))
    flips = [f for t in tallies.values() for f in (*t.regressed, *t.improved)]
    if baseline_again is not None and flips:
        _fill_baseline_text(baseline_again, flips)
    changes = [_scorer_change(name, tally) for name, tally in tallies.items()]
    return Comparison(
        baseline_source=sources[0],
        candidate_source=sources[1],
        paired_by=pairing.paired_by,
        scorers=changes,
        only_baseline=len(pairing.rows) - len(pairing.used),
        only_candidate=candidate_rows - len(pairing.used) - pairing.repeated - pairing.without_id,
        repeated_ids=pairing.repeated,
        missing_ids=pairing.without_id,
    )


def _tally_for(
    tallies: dict[str, _Tally],
    name: str,
    result: Mapping[str, Any] | None,
    marks: Mapping[str, float],
) -> _Tally:
    """The scorer's tally, made on first use; its pass mark is set on the scorer's own range
    from the first `result` there is (a row that lost the scorer has none)."""
    tally = tallies.setdefault(name, _Tally(marks.get(name, PASS_THRESHOLD)))
    if result is not None and not tally.read_scale:
        scale = ScoreScale.of(result)
        tally.pass_mark = marks.get(name, scale.pass_mark(PASS_THRESHOLD))
        tally.inverted, tally.read_scale = scale.inverted, True
    return tally


def _count(
    tally: _Tally,
    line: Mapping[str, Any],
    name: str,
    partner: int,
    scores: tuple[float, float],
    labels: tuple[dict[str, bool], dict[str, bool]],
) -> None:
    old_score, score = scores
    tally.differences[round(score - old_score, 4)] += 1
    tally.baseline_total += old_score
    tally.candidate_total += score
    old_labels, new_labels = labels
    for instruction, label in new_labels.items():
        if instruction not in old_labels:
            continue
        before = old_labels[instruction]
        tally.labels.setdefault(instruction, Counter())[float(int(label) - int(before))] += 1
        totals = tally.label_totals.setdefault(instruction, [0, 0])
        totals[0] += before
        totals[1] += label
    if tally.inverted:
        passed_before, passes_now = old_score <= tally.pass_mark, score <= tally.pass_mark
    else:
        passed_before, passes_now = old_score >= tally.pass_mark, score >= tally.pass_mark
    if passed_before == passes_now:
        return
    listed, counter = (
        (tally.regressed, "regressed_count")
        if passed_before
        else (tally.improved, "improved_count")
    )
    setattr(tally, counter, getattr(tally, counter) + 1)
    if len(listed) < LISTED_FLIPS:
        key = str(line.get("id") if line.get("id") not in (None, "") else line.get("row"))
        listed.append(
            Flip(
                key=key,
                row=line.get("row"),
                row_id=line.get("id"),
                baseline_row=partner,
                baseline_score=old_score,
                candidate_score=score,
                candidate_text=RowText.of(line),
                candidate_verdicts=_verdicts(line, name),
            )
        )


def _fill_baseline_text(lines: Iterable[Mapping[str, Any]], flips: list[Flip]) -> None:
    wanted: dict[int, list[Flip]] = {}
    for flip in flips:
        wanted.setdefault(flip.baseline_row, []).append(flip)
    for line in lines:
        for flip in wanted.get(int(line["row"]), ()):
            flip.baseline_text = RowText.of(line)


def _scorer_change(name: str, tally: _Tally) -> ScorerChange:
    pairs = sum(tally.differences.values())
    change = (
        _change(tally.differences, tally.baseline_total, tally.candidate_total) if pairs else None
    )
    instructions = [
        InstructionChange(
            instruction,
            sum(counts.values()),
            _change(
                counts,
                float(tally.label_totals[instruction][0]),
                float(tally.label_totals[instruction][1]),
            ),
        )
        for instruction, counts in tally.labels.items()
    ]
    return ScorerChange(
        name=name,
        pass_mark=tally.pass_mark,
        pairs=pairs,
        errored=tally.errored,
        lost=tally.lost,
        change=change,
        instructions=instructions,
        regressed=tally.regressed_count,
        improved=tally.improved_count,
        regressed_rows=tally.regressed,
        improved_rows=tally.improved,
    )
