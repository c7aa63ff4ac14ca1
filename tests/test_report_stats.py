"""Report statistics: histograms, bootstrap intervals, AUROC and calibration from tallies."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from assay import stats


def brute_force_auroc(positive_scores: list[float], negative_scores: list[float]) -> float:
    """AUROC by comparing every positive with every negative (ties count half)."""
    wins = 0.0
    for p in positive_scores:
        for n in negative_scores:
            wins += 1.0 if p > n else 0.5 if p == n else 0.0
    return wins / (len(positive_scores) * len(negative_scores))


def test_histogram_puts_zero_in_the_first_bin_and_one_in_the_last() -> None:
    tally = Counter({0.0: 2, 0.25: 1, 0.5: 3, 0.75: 4, 1.0: 5})

    assert stats.histogram(tally, bins=4) == [2, 1, 3, 9]
    assert stats.histogram(tally) == [2, 0, 1, 0, 0, 3, 0, 4, 0, 5]
    assert stats.histogram(Counter()) == [0] * 10


def test_mean_interval_brackets_the_mean_and_is_reproducible() -> None:
    tally = Counter({0.25: 30, 0.75: 50, 1.0: 20})
    mean = stats.mean(tally)

    interval = stats.mean_interval(tally)

    assert mean == pytest.approx((0.25 * 30 + 0.75 * 50 + 1.0 * 20) / 100)
    assert interval is not None
    assert interval.low < mean < interval.high
    # Standard error of this mean is about 0.025, so a 95% interval is roughly ±0.05.
    assert 0.03 < mean - interval.low < 0.08
    assert 0.03 < interval.high - mean < 0.08
    assert stats.mean_interval(tally) == interval


def test_mean_interval_of_a_constant_score_has_no_width_and_needs_two_rows() -> None:
    constant = stats.mean_interval(Counter({0.5: 40}))
    assert constant is not None
    assert constant.low == constant.high == 0.5
    assert stats.mean_interval(Counter({0.5: 1})) is None
    assert stats.mean(Counter()) is None


def test_auroc_matches_pairwise_comparison_on_random_scores_with_ties() -> None:
    rng = np.random.default_rng(7)
    # Scores on a coarse grid, so there are many ties between the classes.
    positive_scores = list(np.round(rng.beta(5, 2, 300) * 8) / 8)
    negative_scores = list(np.round(rng.beta(2, 3, 200) * 8) / 8)

    area = stats.auroc(Counter(positive_scores), Counter(negative_scores))

    assert area == pytest.approx(brute_force_auroc(positive_scores, negative_scores), abs=1e-12)


def test_auroc_is_one_when_separated_zero_when_reversed_half_when_uninformative() -> None:
    assert stats.auroc(Counter({0.9: 5}), Counter({0.1: 5})) == 1.0
    assert stats.auroc(Counter({0.1: 5}), Counter({0.9: 5})) == 0.0
    assert stats.auroc(Counter({0.5: 5}), Counter({0.5: 7})) == 0.5
    assert stats.auroc(Counter({0.5: 5}), Counter()) is None
    assert stats.auroc_interval(Counter({0.5: 5}), Counter()) is None


def test_auroc_interval_brackets_the_estimate_and_narrows_with_more_rows() -> None:
    small_pos, small_neg = Counter({1.0: 6, 0.75: 3, 0.25: 1}), Counter({0.25: 5, 0.75: 3, 1.0: 2})
    large_pos = Counter({k: v * 20 for k, v in small_pos.items()})
    large_neg = Counter({k: v * 20 for k, v in small_neg.items()})

    small = stats.auroc_interval(small_pos, small_neg)
    large = stats.auroc_interval(large_pos, large_neg)
    area = stats.auroc(small_pos, small_neg)

    assert small is not None and large is not None and area is not None
    assert stats.auroc(large_pos, large_neg) == pytest.approx(area)
    assert 0.0 <= small.low <= area <= small.high <= 1.0
    assert large.low <= area <= large.high
    assert large.high - large.low < (small.high - small.low) / 2


def test_calibration_curve_bins_rows_and_expected_calibration_error_weights_them() -> None:
    positive = Counter({0.2: 1, 0.9: 8, 1.0: 1})
    negative = Counter({0.2: 3, 0.9: 2})

    curve = stats.calibration_curve(positive, negative, bins=5)

    assert [(p.low, p.high, p.rows) for p in curve] == [(0.2, 0.4, 4), (0.8, 1.0, 11)]
    assert curve[0].mean_score == pytest.approx(0.2)
    assert curve[0].observed_rate == pytest.approx(0.25)
    assert curve[1].mean_score == pytest.approx((0.9 * 10 + 1.0) / 11)
    assert curve[1].observed_rate == pytest.approx(9 / 11)
    expected = (4 * abs(0.2 - 0.25) + 11 * abs((0.9 * 10 + 1.0) / 11 - 9 / 11)) / 15
    assert stats.expected_calibration_error(curve) == pytest.approx(expected)
    assert stats.expected_calibration_error([]) is None


def test_mean_interval_is_the_plain_multinomial_bootstrap_with_the_shared_seed() -> None:
    # The run summary computes its interval in one multinomial draw with this seed; drawing in
    # chunks must give the very same resamples, so both commands print the same interval.
    tally = Counter({0.0: 3, 0.25: 5, 0.5: 9, 0.75: 14, 1.0: 21})
    values = np.array(sorted(tally), dtype=np.float64)
    counts = np.array([tally[v] for v in sorted(tally)], dtype=np.float64)
    rng = np.random.default_rng(stats.BOOTSTRAP_SEED)
    means = rng.multinomial(52, counts / 52, size=stats.DEFAULT_RESAMPLES) @ values / 52
    low, high = np.percentile(means, [2.5, 97.5])

    interval = stats.mean_interval(tally)

    assert interval is not None
    assert (interval.low, interval.high) == (low, high)


@pytest.mark.parametrize(
    ("tally", "low", "high"),
    [
        ({(1, 1): 2}, 0.3424, 1.0),  # 2 of 2: not the point [1, 1] a bootstrap gives
        ({(0, 1): 6}, 0.0, 0.3903),  # 0 of 6
        ({(1, 2): 1}, 0.0945, 0.9055),  # one row: an interval all the same
    ],
)
def test_a_rate_interval_over_few_rows_says_how_little_they_show(
    tally: dict[tuple[int, int], int], low: float, high: float
) -> None:
    interval = stats.ratio_interval(tally)
    assert interval is not None
    assert (round(interval.low, 4), round(interval.high, 4)) == (low, high)


def test_a_rate_interval_over_many_rows_is_the_row_bootstrap_where_it_is_wider() -> None:
    # Rows that disagree: the bootstrap over rows (cases of a row are not independent) is
    # wider than the Wilson interval of the cases, and is kept.
    tally = {(0, 3): 20, (3, 3): 20}
    interval = stats.ratio_interval(tally)
    assert interval is not None
    wilson = stats.wilson_interval(0.5, 120)
    assert interval.low < wilson[0] and interval.high > wilson[1]
    assert stats.ratio_interval({}) is None


def test_a_score_scale_reads_range_and_direction_from_a_result() -> None:
    plain = stats.ScoreScale.of({"score": 0.5})
    assert plain == stats.UNIT_SCALE and plain.passes(0.7, 0.7) and not plain.passes(0.69, 0.7)
    rate = stats.ScoreScale.of({"score_range": [0, 10], "inverted": True})
    assert (rate.low, rate.high, rate.inverted) == (0.0, 10.0, True)
    assert rate.pass_mark(0.7) == pytest.approx(3.0) and rate.pass_label(0.7) == "≤ 3"
    assert rate.passes(3.0, 0.7) and not rate.passes(3.5, 0.7)
    assert sorted([2.0, 9.0, 5.0], key=rate.worse_first) == [9.0, 5.0, 2.0]
    # A range that makes no sense is read as [0, 1]; the direction is kept.
    odd = stats.ScoreScale.of({"score_range": [5, 1], "inverted": True})
    assert (odd.low, odd.high, odd.inverted) == (0.0, 1.0, True)
