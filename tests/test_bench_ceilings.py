"""The damage ceilings of `bench/sanity.py` (`bench/ceilings.py`): how far moving each
instruction's label threshold could take the score of (good answer, damaged copy) pairs."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import ceilings  # noqa: E402
from common import pairwise  # noqa: E402


def test_at_one_half_the_score_accuracy_is_the_label_rules() -> None:
    rng = np.random.default_rng(3)
    p = rng.random((40, 4))
    sides = (list(range(0, 40, 2)), list(range(1, 40, 2)))
    score = (p >= 0.5).mean(axis=1)
    expected = pairwise(score[sides[0]], score[sides[1]])
    assert ceilings.score_accuracy(p, sides, np.full(4, 0.5)) == expected


def test_a_kind_whose_labels_never_flip_at_one_half_finds_its_own_threshold() -> None:
    # Instruction 0 orders every pair (good 0.3–0.4, copy 0.1–0.2) but both sides sit below
    # 0.5, so every pair ties at the label rule; instruction 1 is the same on both sides.
    good = [[0.3 + 0.01 * i, 0.9] for i in range(10)]
    bad = [[0.1 + 0.01 * i, 0.9] for i in range(10)]
    p = np.array(good + bad)
    sides = (list(range(10)), list(range(10, 20)))
    assert ceilings.score_accuracy(p, sides, np.full(2, 0.5)) == 0.5
    assert ceilings.own_ceiling(p, sides) == 1.0


def test_one_set_of_thresholds_for_two_kinds_that_want_different_ones() -> None:
    # Kind a's pairs flip at a threshold in (0.1, 0.3], kind b's in (0.6, 0.8]; a's good answers
    # sit below b's copies, so no single threshold of the one instruction serves both.
    p = np.array([[0.3], [0.1], [0.8], [0.6]])
    kinds = {"a": ([0], [1]), "b": ([2], [3])}
    assert ceilings.own_ceiling(p, kinds["a"]) == 1.0
    assert ceilings.own_ceiling(p, kinds["b"]) == 1.0
    thresholds = ceilings.joint_thresholds(p, kinds)
    values = [ceilings.score_accuracy(p, sides, thresholds) for sides in kinds.values()]
    # The best lowest kind is a tie (0.5): flipping one kind's pair leaves the other tied.
    assert min(values) == 0.5
    assert max(values) == 1.0
    sentence = ceilings.joint_ceiling(p, kinds, ["check"])
    assert "lowest 0.500, mean 0.750" in sentence
