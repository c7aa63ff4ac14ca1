"""How far calibration alone could take the damage-pair score (`bench/sanity.py`).

A recalibration of an instruction's probability can only move where its label flips: the
ceilings here try every such place per instruction and keep the best, on the very pairs they
score, so they are upper bounds, not results.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from common import pairwise

#: Thresholds the ceilings try for each instruction (its label true where p is at least that).
CEILING_GRID = np.round(np.arange(0.02, 0.99, 0.02), 2)
#: Coordinate-ascent sweeps over the instructions.
CEILING_SWEEPS = 3

Sides = tuple[list[int], list[int]]  # rows of the good answers, rows of their damaged copies


def score_accuracy(p: np.ndarray, sides: Sides, thresholds: np.ndarray) -> float:
    """Pairwise accuracy of the score when instruction c's label is p[:, c] >= thresholds[c]."""
    good, bad = sides
    return pairwise((p[good] >= thresholds).sum(axis=1), (p[bad] >= thresholds).sum(axis=1))


def best_thresholds(
    p: np.ndarray, objective: Callable[[np.ndarray], tuple[float, ...]]
) -> np.ndarray:
    """Per-instruction thresholds that raise `objective`: coordinate ascent from 0.5 (the
    label rule), each instruction in turn trying every CEILING_GRID value."""
    thresholds = np.full(p.shape[1], 0.5)
    best = objective(thresholds)
    for _ in range(CEILING_SWEEPS):
        for c in range(p.shape[1]):
            for value in CEILING_GRID:
                trial = thresholds.copy()
                trial[c] = value
                if (result := objective(trial)) > best:
                    best, thresholds = result, trial
    return thresholds


def own_ceiling(p: np.ndarray, sides: Sides) -> float:
    """The best score one kind's pairs reach with thresholds chosen for that kind alone."""
    thresholds = best_thresholds(p, lambda t: (score_accuracy(p, sides, t),))
    return score_accuracy(p, sides, thresholds)


def joint_thresholds(p: np.ndarray, kinds: dict[str, Sides]) -> np.ndarray:
    """One set of thresholds for every kind, chosen to raise the lowest kind's score (then the
    mean)."""

    def objective(thresholds: np.ndarray) -> tuple[float, float]:
        values = [score_accuracy(p, sides, thresholds) for sides in kinds.values()]
        return min(values), float(np.mean(values))

    return best_thresholds(p, objective)


def joint_ceiling(p: np.ndarray, kinds: dict[str, Sides], checks: list[str]) -> str:
    """`joint_thresholds` and what each kind scores with them, as a sentence for the report."""
    thresholds = joint_thresholds(p, kinds)
    values = [score_accuracy(p, sides, thresholds) for sides in kinds.values()]
    per_kind = ", ".join(f"{k} {v:.3f}" for k, v in zip(kinds, values, strict=True))
    chosen = ", ".join(f"{c} {t:.2f}" for c, t in zip(checks, thresholds, strict=True))
    return (
        "Ceiling with one set of thresholds for every kind at once (chosen on these pairs to "
        f"raise the lowest kind): lowest {min(values):.3f}, mean {np.mean(values):.3f} "
        f"({per_kind}); thresholds {chosen}."
    )
