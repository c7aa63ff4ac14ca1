"""The profile's own linear separator: a balanced L2 logistic fit, and a reference that is the
query itself never vouches for it."""

from __future__ import annotations

import numpy as np

from assay.metrics.ood.separator import FOLDS, Separator, fit_logistic


def _unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def _clusters(rng: np.random.Generator, listed: int, contrast: int) -> tuple[np.ndarray, ...]:
    centre = np.zeros(16)
    centre[0] = 1.0
    other = np.zeros(16)
    other[1] = 1.0
    return (
        _unit(centre + 0.15 * rng.standard_normal((listed, 16))),
        _unit(other + 0.15 * rng.standard_normal((contrast, 16))),
    )


def test_the_fit_separates_and_balances_a_small_listed_set_against_a_large_contrast() -> None:
    rng = np.random.default_rng(0)
    listed, contrast = _clusters(rng, 10, 500)
    x = np.vstack([listed, contrast])
    y = np.arange(len(x)) < len(listed)
    w = fit_logistic(x, y)
    scores = np.hstack([x, np.ones((len(x), 1))]) @ w
    assert scores[:10].min() > 0 > scores[10:].max()
    # Balanced classes: a point halfway between the two centres sits near the boundary,
    # not deep on the side of the 50 times larger set.
    middle = _unit(np.eye(16)[[0]] + np.eye(16)[[1]])[0]
    assert abs(float(np.append(middle, 1.0) @ w)) < 1.0
    # A stronger penalty (smaller strength) gives smaller weights; the intercept is free.
    assert np.linalg.norm(fit_logistic(x, y, strength=0.01)[:-1]) < np.linalg.norm(w[:-1])


def test_a_query_that_is_one_of_the_references_is_scored_without_it() -> None:
    rng = np.random.default_rng(1)
    listed, contrast = _clusters(rng, 30, 300)
    # A listed outlier far inside the contrast cluster: the full fit bends towards it.
    outlier = _unit(np.eye(16)[[1]] + 0.05 * np.eye(16)[[2]])
    listed = np.vstack([listed, outlier])
    separator = Separator.fit(listed, contrast)
    assert len(separator.folds) == FOLDS
    # The outlier is reference number 30 (listed come first).
    (as_itself,) = separator.scores(outlier, np.array([30]))
    (full,) = np.append(outlier[0], 1.0) @ separator.full[None, :].T
    assert as_itself < full
    assert as_itself < 0  # without itself, the outlier reads as a contrast text
    # A new query (no reference that close) is scored by the full model.
    fresh = _unit(np.eye(16)[[0]] + 0.01 * np.eye(16)[[3]])
    (score,) = separator.scores(fresh, np.array([-1]))
    assert score == np.append(fresh[0], 1.0) @ separator.full


def test_nothing_to_separate_scores_zero() -> None:
    rng = np.random.default_rng(2)
    listed, _ = _clusters(rng, 5, 1)
    separator = Separator.fit(listed, np.zeros((0, 16), np.float32))
    assert not separator.scores(listed, np.full(len(listed), -1)).any()
