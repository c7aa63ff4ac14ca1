"""A profile's own linear separator: listed texts against every contrast text, in embedding space.

The nearest-neighbour features of `scope.py` look at single references; a logistic model fitted
on all of a profile's references at once finds the direction that parts its field from the rest,
which carries over to paraphrases that share no close reference. It is fitted when the profile's
index is built (no data beyond the profile and the banks), so it never sees a scored query.

A reference that is (almost) the query itself must not vouch for it (see `SELF_MATCH` in
`scope.py`), so the references are also split into `FOLDS` folds, each with a model fitted
without it: a query matching a reference is scored by the model that did not see that reference.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from assay.judges.embedded.encoder import Matrix

#: Inverse L2 strength, as scikit-learn's C: chosen by watching the leave-one-profile-out scope
#: figures (0.3, 3 and 10 gave the same within one profile; see DEVELOPERS.md).
STRENGTH = 1.0
#: Folds for scoring queries that are (almost) one of the references.
FOLDS = 5
_STEPS = 50
_TOLERANCE = 1e-6

Vector = npt.NDArray[np.float64]


def fit_logistic(
    x: Matrix, y: npt.NDArray[np.bool_], strength: float = STRENGTH, start: Vector | None = None
) -> Vector:
    """Weights (last one the intercept) of an L2 logistic model, classes weighted to balance.

    Newton's method on 0.5·|w|² + strength · Σ weight·log-loss (the intercept unpenalised), the
    objective scikit-learn's LogisticRegression(C=strength, class_weight="balanced") minimises.
    start: weights to begin from (a close solution converges in a few steps).
    """
    rows = np.hstack([x.astype(np.float64), np.ones((len(x), 1))])
    target = y.astype(np.float64)
    positives = max(int(y.sum()), 1)
    negatives = max(len(y) - int(y.sum()), 1)
    weight = strength * np.where(y, len(y) / (2 * positives), len(y) / (2 * negatives))
    penalty = np.ones(rows.shape[1])
    penalty[-1] = 0.0
    w = np.zeros(rows.shape[1]) if start is None else start.copy()
    for _ in range(_STEPS):
        p = 1.0 / (1.0 + np.exp(-(rows @ w)))
        gradient = rows.T @ (weight * (p - target)) + penalty * w
        hessian = (rows * (weight * p * (1 - p))[:, None]).T @ rows + np.diag(penalty)
        step = np.linalg.solve(hessian, gradient)
        w -= step
        if float(np.abs(step).max()) < _TOLERANCE:
            break
    return w


@dataclass(frozen=True)
class Separator:
    """The profile's separator, and its fold models for queries that are one of the references.

    References are numbered as given to `fit` (listed first, then contrast); reference i is left
    out of fold model i % FOLDS.
    """

    full: Vector
    folds: tuple[Vector, ...]

    @classmethod
    def fit(cls, listed: Matrix, contrast: Matrix) -> Separator:
        if not len(listed) or not len(contrast):  # nothing to separate: every query scores 0
            none = np.zeros(listed.shape[1] + 1)
            return cls(none, (none,) * FOLDS)
        references = np.vstack([listed, contrast])
        labels = np.arange(len(references)) < len(listed)
        full = fit_logistic(references, labels)
        fold_of = np.arange(len(references)) % FOLDS
        folds = tuple(
            fit_logistic(references[fold_of != k], labels[fold_of != k], start=full)
            for k in range(FOLDS)
        )
        return cls(full, folds)

    def scores(self, query_vectors: Matrix, itself: npt.NDArray[np.int64]) -> Vector:
        """Decision value (log-odds, before calibration) of each query being a listed text.

        itself: per query, the number of the reference that is the query itself, or -1.
        """
        rows = np.hstack([query_vectors.astype(np.float64), np.ones((len(query_vectors), 1))])
        out = rows @ self.full
        for q in np.flatnonzero(itself >= 0):
            out[q] = rows[q] @ self.folds[int(itself[q]) % FOLDS]
        return out
