"""Judgment sanity suite: does each instruction answer to the damage it names?

For every kind of damage in `bench/damage.py`, pairs (good answer, damaged copy) are built from the
dev rows (`bench/pairs.py`). For each kind and detector this prints the pairwise accuracy (share of
pairs where the good answer gets the higher value; ties count half, so a constant scores 0.5) of:
the detector `score`, the mean follow_probability, and each instruction the damage targets.

Figures are out-of-fold: a pair is scored by a calibration fitted on the other four folds, which
never saw the pair's question group (nor its damaged copies). A final column gives the shipped
calibration on the same pairs, in-sample, for comparison.

Two ceilings say how far calibration alone could go (where each instruction's label flips), with
the evidence as it is: the score each kind would reach with per-instruction thresholds chosen for
that kind alone, and with one set of thresholds for every kind at once (chosen to raise the
lowest kind). Both are chosen on the pairs they score, so they are upper bounds, not results.

    python bench/sanity.py
"""

from __future__ import annotations

import numpy as np

import common
import damage
from assay.detectors import DETECTORS
from assay.judges.embedded.calibration import load_calibration
from calibrate import Table, build_table, markdown, out_of_fold
from ceilings import Sides, joint_ceiling, own_ceiling
from common import pairwise
from pairs import dev_set

TARGET_CHECK = 0.95
TARGET_SCORE = 0.90


def shipped(table: Table) -> np.ndarray | None:
    """The shipped calibration's probabilities for every row (in-sample); None when the shipped
    calibration was fitted on other features (refit it with `bench/calibrate.py`)."""
    try:
        calibration = load_calibration()
    except ValueError:
        return None
    checks = [i.check for i in DETECTORS[table.detector].instructions]
    out = np.zeros((len(table.rows), len(checks)))
    for c, check in enumerate(checks):
        model = calibration.checks[check]  # the judge's own mapping, curve included
        out[:, c] = [model.probability(features) for features in table.features]
    return out


def kind_sides(table: Table) -> dict[str, Sides]:
    """Each damage kind that targets the table's detector, with its pairs' rows."""
    damaged = table.rows[table.n_human :]
    out = {}
    for kind in damage.KINDS:
        good = [
            table.n_human + i
            for i, r in enumerate(damaged)
            if r.kind == kind.name and not r.damaged
        ]
        if kind.targets.get(table.detector) and good:
            out[kind.name] = (good, [i + 1 for i in good])
    return out


def kind_rows(
    table: Table, probs: np.ndarray, in_sample: np.ndarray | None, sides: dict[str, Sides]
) -> list[tuple[str, ...]]:
    checks = [i.check for i in DETECTORS[table.detector].instructions]
    out = []
    for name, (good, bad) in sides.items():
        targets = damage.KIND_BY_NAME[name].targets[table.detector]
        rules = sorted({table.rows[i].rule for i in bad})
        ceiling = f"{own_ceiling(probs, (good, bad)):.3f}"

        def figures(
            p: np.ndarray, g: list[int], b: list[int], targets: tuple[str, ...] = targets
        ) -> tuple[float, float, list[float]]:
            score, mean_p = (p >= 0.5).mean(axis=1), p.mean(axis=1)
            per = [pairwise(p[g, checks.index(c)], p[b, checks.index(c)]) for c in targets]
            return pairwise(score[g], score[b]), pairwise(mean_p[g], mean_p[b]), per

        for rule in [None, *rules] if len(rules) > 1 else [None]:
            g = [i for i in good if rule is None or table.rows[i + 1].rule == rule]
            b = [i + 1 for i in g]
            s, m, per = figures(probs, g, b)
            s_in = f"{figures(in_sample, g, b)[0]:.3f}" if in_sample is not None else "—"
            ok = "" if rule else (" ✓" if s >= TARGET_SCORE and min(per) >= TARGET_CHECK else " ✗")
            out.append(
                (
                    name + ok if rule is None else f"  ↳ {rule}",
                    str(len(g)),
                    f"{s:.3f}",
                    f"{m:.3f}",
                    ", ".join(f"{c} {v:.3f}" for c, v in zip(targets, per, strict=True)),
                    s_in,
                    ceiling if rule is None else "—",
                )
            )
    return out


def main() -> None:
    args = common.script_parser(__doc__).parse_args()
    data = dev_set()
    sections = []
    for detector in DETECTORS:
        table = build_table(data, detector)
        probs = out_of_fold(table)
        sides = kind_sides(table)
        rows = kind_rows(table, probs, shipped(table), sides)
        checks = [i.check for i in DETECTORS[detector].instructions]
        sections.append(
            f"### {detector}\n\n"
            + markdown(
                (
                    "damage (rule)",
                    "pairs",
                    "score",
                    "mean follow_probability",
                    "targeted instructions",
                    "score, shipped calibration, in-sample (same features)",
                    "ceiling: score with this kind's own best thresholds (chosen on these pairs)",
                ),
                rows,
            )
            + "\n\n"
            + joint_ceiling(probs, sides, checks)
        )
    text = "\n\n".join(sections)
    print(text)
    if not args.no_write:
        common.write_section(
            "Judgment sanity (damaged answers)",
            __doc__.split("\n\n    python")[0]
            + f"\n\nTargets: every targeted instruction ≥ {TARGET_CHECK}, score ≥ {TARGET_SCORE}, per kind (✓/✗).\n\n"
            + text,
        )


if __name__ == "__main__":
    main()
