"""Numbers for the report: score histograms, bootstrap intervals, AUROC and calibration.

Every function here takes a *tally* instead of one value per row: the distinct scores seen, and
how many rows had each (split into gold-positive and gold-negative rows where gold labels exist).
Scores live on a 4-decimal grid, so a run of any length folds into at most 10,001 distinct values
and nothing here grows with the number of rows. Drawing a tally's counts from a multinomial is
the same as resampling its rows with replacement, which keeps the bootstrap cheap too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
import numpy.typing as npt

#: Histogram and calibration bins over the score range [0, 1].
DEFAULT_BINS = 10
#: Bootstrap resamples behind every interval.
DEFAULT_RESAMPLES = 2000
#: Seed of every bootstrap, so the same output always gives the same intervals. It is the seed
#: the run summary uses, so `assay run` and `assay report` print the same interval for a mean.
BOOTSTRAP_SEED = 20261129
#: Resamples drawn per numpy call, so memory stays small when there are many distinct scores.
_RESAMPLE_CHUNK = 200

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Interval:
    """A two-sided bootstrap interval: `low` and `high` bound the middle `level` of resamples."""

    low: float
    high: float
    level: float = 0.95


@dataclass(frozen=True)
class CalibrationBin:
    """One point of a reliability curve.

    low / high: the score range of the bin ([low, high), the last bin includes 1.0).
    mean_score: the mean score of the gold-labelled rows in the bin.
    observed_rate: the share of those rows whose gold label is positive.
    rows: how many gold-labelled rows fell in the bin.
    """

    low: float
    high: float
    mean_score: float
    observed_rate: float
    rows: int


@dataclass(frozen=True)
class ScoreScale:
    """The range a scorer's scores run over: [0, 1] for every detector; a metric's config may
    map its scores onto another range (`llm.ood_detection`'s `min` and `max`), which its results
    then carry as `score_range`, and may invert them into an error rate (`"inverted": true`:
    higher is worse). Histograms, pass marks, gate thresholds and "worst rows" follow both."""

    low: float = 0.0
    high: float = 1.0
    inverted: bool = False

    @classmethod
    def of(cls, result: Mapping[str, object]) -> ScoreScale:
        """The range a result says its score is on (`score_range`: [low, high]; [0, 1] when it
        says none or something unusable) and whether it says higher is worse (`inverted`)."""
        inverted = result.get("inverted") is True
        given = result.get("score_range")
        if isinstance(given, list | tuple) and len(given) == 2:
            low, high = given
            numbers = all(isinstance(x, int | float) and not isinstance(x, bool) for x in given)
            if numbers and math.isfinite(low) and math.isfinite(high) and low < high:
                return cls(float(low), float(high), inverted)
        return cls(inverted=inverted)

    @property
    def is_unit(self) -> bool:
        return (self.low, self.high) == (0.0, 1.0)

    def pass_mark(self, share: float) -> float:
        """The score a row must reach to pass when passing means `share` of the way to the best
        score: `at(share)`, or for an error rate `at(1 - share)`, which a row must not exceed."""
        # Rounded so float dust (1 - 0.7 = 0.30000000000000004) cannot fail a row exactly on it.
        return round(self.at(1.0 - share if self.inverted else share), 9)

    def passes(self, score: float, share: float) -> bool:
        """Whether `score` is at least as good as the pass mark for `share` (see `pass_mark`)."""
        mark = self.pass_mark(share)
        return score <= mark if self.inverted else score >= mark

    def pass_label(self, share: float) -> str:
        """The pass mark as a reader sees it: "≥ 0.7", or "≤ 30" for an error rate on 0–100."""
        return f"{'≤' if self.inverted else '≥'} {self.label(self.pass_mark(share))}"

    def worse_first(self, score: float) -> float:
        """A sort key that puts worse scores first: the score, or its negation for an error rate."""
        return -score if self.inverted else score

    def at(self, share: float) -> float:
        """The score a share of the way from `low` to `high`."""
        return self.low + (self.high - self.low) * share

    def label(self, value: float) -> str:
        """A band edge as written: one decimal on [0, 1] (0.7), else as short as exact."""
        return f"{value:.1f}" if self.is_unit else f"{round(value, 4):g}"


#: The range of every detector's score.
UNIT_SCALE = ScoreScale()


def _arrays(tally: Mapping[float, int]) -> tuple[FloatArray, FloatArray]:
    """Distinct values (ascending) and their counts as float arrays."""
    values = np.array(sorted(tally), dtype=np.float64)
    counts = np.array([tally[v] for v in sorted(tally)], dtype=np.float64)
    return values, counts


def _bin_index(values: FloatArray, bins: int) -> npt.NDArray[np.int64]:
    """Bin of each score in [0, 1]; a score of exactly 1.0 goes in the last bin, not past it.
    Scores are 0 to 1 by contract; one outside that range would land in the nearest end bin."""
    return np.clip(np.floor(values * bins), 0, bins - 1).astype(np.int64)


def histogram(
    tally: Mapping[float, int], bins: int = DEFAULT_BINS, scale: ScoreScale = UNIT_SCALE
) -> list[int]:
    """Rows per score bin: `bins` equal-width bins over the scale's range ([0, 1] by default).

    tally: distinct score -> number of rows with it.
    bins: number of bins.
    scale: the range the scores run over.
    """
    result = np.zeros(bins, dtype=np.int64)
    if tally:
        values, counts = _arrays(tally)
        shares = (values - scale.low) / (scale.high - scale.low)
        np.add.at(result, _bin_index(shares, bins), counts.astype(np.int64))
    return [int(count) for count in result]


def mean(tally: Mapping[float, int]) -> float | None:
    """Mean score over all rows of `tally`; None when it is empty."""
    total = sum(tally.values())
    if not total:
        return None
    return float(sum(value * count for value, count in tally.items()) / total)


def _percentile_interval(samples: FloatArray, level: float) -> Interval | None:
    samples = samples[~np.isnan(samples)]
    if samples.size == 0:
        return None
    tail = (1.0 - level) / 2.0 * 100.0
    low, high = np.percentile(samples, [tail, 100.0 - tail])
    return Interval(float(low), float(high), level)


def _resampled_counts(counts: FloatArray, resamples: int, seed: int) -> list[npt.NDArray[np.int64]]:
    """`resamples` bootstrap draws of `counts` (one row of new counts per draw), in chunks."""
    rng = np.random.default_rng(seed)
    total = int(counts.sum())
    probabilities = counts / counts.sum()
    chunks = []
    for start in range(0, resamples, _RESAMPLE_CHUNK):
        size = min(_RESAMPLE_CHUNK, resamples - start)
        chunks.append(rng.multinomial(total, probabilities, size=size))
    return chunks


def mean_interval(
    tally: Mapping[float, int],
    resamples: int = DEFAULT_RESAMPLES,
    level: float = 0.95,
    seed: int = BOOTSTRAP_SEED,
) -> Interval | None:
    """Bootstrap percentile interval of the mean score; None with fewer than two rows.

    tally: distinct score -> number of rows with it.
    resamples: how many bootstrap resamples to draw.
    level: the interval's coverage (0.95 for a 95% interval).
    seed: random seed, fixed so the same output always gives the same report.
    """
    if sum(tally.values()) < 2:
        return None
    values, counts = _arrays(tally)
    total = counts.sum()
    means = [chunk @ values / total for chunk in _resampled_counts(counts, resamples, seed)]
    return _percentile_interval(np.concatenate(means), level)


def ratio_interval(
    tally: Mapping[tuple[int, int], int],
    resamples: int = DEFAULT_RESAMPLES,
    level: float = 0.95,
    seed: int = BOOTSTRAP_SEED,
) -> Interval | None:
    """Interval of a rate pooled over rows: a bootstrap that resamples rows (not their parts),
    widened to hold the Wilson score interval of the pooled rate over its cases.

    tally: (part, whole) of one row -> rows with those counts; the rate is the sum of parts over
        the sum of wholes (e.g. over-rejections over in-scope cases, with several cases a row).
    Resampling whole rows keeps the cases of a row together, as they are not independent. A
    bootstrap of a rate that is 0 or 1 in every row is that single point whatever the number of
    rows ("1.000 (1.000-1.000)" from two rows); the Wilson interval says how little a few
    cases show. None when no row has a whole.
    """
    kept = {key: n for key, n in tally.items() if key[1] > 0}
    rows = sum(kept.values())
    if rows == 0:
        return None
    keys = sorted(kept)
    parts = np.array([k[0] for k in keys], dtype=np.float64)
    wholes = np.array([k[1] for k in keys], dtype=np.float64)
    counts = np.array([kept[k] for k in keys], dtype=np.float64)
    cases = float(counts @ wholes)
    low, high = wilson_interval(float(counts @ parts) / cases, cases, level)
    if rows >= 2:
        rates = [
            (chunk @ parts) / (chunk @ wholes)
            for chunk in _resampled_counts(counts, resamples, seed)
        ]
        boot = _percentile_interval(np.concatenate(rates), level)
        if boot is not None:
            low, high = min(low, float(boot.low)), max(high, float(boot.high))
    return Interval(low, high, level)


def wilson_interval(rate: float, n: float, level: float = 0.95) -> tuple[float, float]:
    """The Wilson score interval of a proportion `rate` observed over `n` trials."""
    z = float(NormalDist().inv_cdf(0.5 + level / 2))
    centre = (rate + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(rate * (1 - rate) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def _auroc_from_counts(positives: FloatArray, negatives: FloatArray) -> FloatArray:
    """AUROC for each row of per-value positive and negative counts (values ascending).

    A positive beats every negative with a lower score and ties count half (the Mann-Whitney
    statistic), so a score that cannot tell the classes apart gets 0.5.
    """
    negatives_below = np.cumsum(negatives, axis=-1) - negatives
    wins = (positives * (negatives_below + 0.5 * negatives)).sum(axis=-1)
    pairs = positives.sum(axis=-1) * negatives.sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(pairs > 0, wins / np.where(pairs > 0, pairs, 1.0), np.nan)


def _split_arrays(
    positive: Mapping[float, int], negative: Mapping[float, int]
) -> tuple[FloatArray, FloatArray, FloatArray]:
    values = np.array(sorted({*positive, *negative}), dtype=np.float64)
    positives = np.array([positive.get(v, 0) for v in values], dtype=np.float64)
    negatives = np.array([negative.get(v, 0) for v in values], dtype=np.float64)
    return values, positives, negatives


def auroc(positive: Mapping[float, int], negative: Mapping[float, int]) -> float | None:
    """Area under the ROC curve of score against gold label; None unless both classes occur.

    positive: score -> number of gold-positive rows (the response is good) with it.
    negative: score -> number of gold-negative rows with it.
    """
    _, positives, negatives = _split_arrays(positive, negative)
    if not positives.sum() or not negatives.sum():
        return None
    return float(_auroc_from_counts(positives, negatives))


def auroc_interval(
    positive: Mapping[float, int],
    negative: Mapping[float, int],
    resamples: int = DEFAULT_RESAMPLES,
    level: float = 0.95,
    seed: int = BOOTSTRAP_SEED,
) -> Interval | None:
    """Bootstrap percentile interval of the AUROC (rows resampled as score/label pairs).

    Arguments as for `auroc`, plus `resamples`, `level` and `seed` as for `mean_interval`.
    Resamples that happen to hold only one class are dropped; None unless both classes occur.
    """
    _, positives, negatives = _split_arrays(positive, negative)
    if not positives.sum() or not negatives.sum():
        return None
    cells = np.concatenate([positives, negatives])
    width = positives.size
    areas = [
        _auroc_from_counts(chunk[:, :width].astype(np.float64), chunk[:, width:].astype(np.float64))
        for chunk in _resampled_counts(cells, resamples, seed)
    ]
    return _percentile_interval(np.concatenate(areas), level)


def calibration_curve(
    positive: Mapping[float, int], negative: Mapping[float, int], bins: int = DEFAULT_BINS
) -> list[CalibrationBin]:
    """Reliability curve: per score bin, the mean score against the observed positive rate.

    Arguments as for `auroc`; `bins` equal-width bins over [0, 1]. Empty bins are left out.
    """
    values, positives, negatives = _split_arrays(positive, negative)
    curve: list[CalibrationBin] = []
    if values.size == 0:
        return curve
    index = _bin_index(values, bins)
    for number in range(bins):
        inside = index == number
        rows = positives[inside].sum() + negatives[inside].sum()
        if not rows:
            continue
        weights = positives[inside] + negatives[inside]
        curve.append(
            CalibrationBin(
                low=number / bins,
                high=(number + 1) / bins,
                mean_score=float(values[inside] @ weights / rows),
                observed_rate=float(positives[inside].sum() / rows),
                rows=int(rows),
            )
        )
    return curve


def expected_calibration_error(curve: list[CalibrationBin]) -> float | None:
    """Row-weighted mean gap between mean score and observed rate over the curve's bins."""
    rows = sum(point.rows for point in curve)
    if not rows:
        return None
    gaps = sum(point.rows * abs(point.mean_score - point.observed_rate) for point in curve)
    return gaps / rows
