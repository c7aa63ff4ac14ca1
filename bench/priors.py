"""How much of the relevance score's AUROC is owed to choosing `calibrate.HUMAN_PRIOR` by
watching it: the same choice made blind to the rows it is scored on.

`calibrate.HUMAN_PRIOR` gives prioritize_relevant and no_tangents other class priors than 0.5,
so that the four relevance labels flip at different points. Those priors were chosen by watching
the out-of-fold score AUROC on all the dev rows, so that figure flatters them. Here, for each
fold k, every combination of priors in `GRID` for the three checks that could stagger is scored
by an inner out-of-fold AUROC on the other four folds only (fits on three, scored on the fourth);
the best is fitted on the four folds and scores fold k. Fold k's rows never took part in
choosing the priors that score them. Done for each damage draw of `bench/redraw.py`.

    python bench/priors.py [--seeds 16 17 18 19 20] [--no-write]
"""

from __future__ import annotations

import itertools
import statistics
from typing import Any

import numpy as np
from sklearn.metrics import roc_auc_score

import calibrate
import common
import pairs
from assay.judges.embedded.signals import feature_names, feature_signs
from calibrate import FOLDS, HUMAN_PRIOR, Table

CHECKS = ("core_intent", "prioritize_relevant", "no_tangents", "no_misinterpretation")
#: The checks whose prior is chosen (core_intent stays at 0.5), and the values tried for each.
VARIED = ("prioritize_relevant", "no_tangents", "no_misinterpretation")
GRID = (0.35, 0.5, 0.65)


def reweighted(table: Table, check: str, followed: float) -> tuple[np.ndarray, ...]:
    """The check's supervision with its human rows' classes weighed `followed` : 1 - followed
    (the damage rows and the human rows' total weight as `build_table` gave them)."""
    index, y, w = table.supervision[check]
    w = w.copy()
    human = index < table.n_human
    w[human] = calibrate.balanced(y[human], w[human], w[human].sum(), followed)
    return index, y, w


def nested_probabilities(table: Table, y: np.ndarray) -> tuple[np.ndarray, list[dict[str, float]]]:
    """Each human row's probabilities under priors chosen without its fold, and the choices."""
    x = {c: common.matrix(table.features, feature_names(c)) for c in CHECKS}
    fits: dict[tuple[str, float, frozenset[int]], dict[str, Any]] = {}

    def spec(check: str, followed: float, left_out: frozenset[int]) -> dict[str, Any]:
        key = (check, followed, left_out)
        if key not in fits:
            index, target, w = reweighted(table, check, followed)
            keep = ~np.isin(table.folds[index], list(left_out))
            rows = x[check][index[keep]]
            fitted = calibrate.fit(rows, target[keep], feature_signs(check), w[keep])
            z = calibrate.logit(fitted, rows)
            fits[key] = fitted | calibrate.curve(z, target[keep], w[keep])
        return fits[key]

    def probabilities(priors: dict[str, float], left_out: frozenset[int], rows: np.ndarray):
        return np.stack(
            [calibrate.predict(spec(c, priors[c], left_out), x[c][rows]) for c in CHECKS], 1
        )

    grid = [
        dict(zip(VARIED, v, strict=True)) | {"core_intent": 0.5}
        for v in itertools.product(GRID, repeat=3)
    ]
    folds = table.folds[: table.n_human]
    out = np.zeros((table.n_human, len(CHECKS)))
    chosen = []
    for k in range(FOLDS):

        def inner_auroc(priors: dict[str, float], k: int = k) -> float:
            """The score's AUROC over the folds other than k, each scored by fits on the rest."""
            scores, truth = [], []
            for j in (j for j in range(FOLDS) if j != k):
                rows = np.where(folds == j)[0]
                p = probabilities(priors, frozenset((k, j)), rows)
                scores.append((p >= 0.5).mean(axis=1))
                truth.append(y[rows])
            return float(roc_auc_score(np.concatenate(truth), np.concatenate(scores)))

        best = max(grid, key=inner_auroc)
        chosen.append(best)
        rows = np.where(folds == k)[0]
        out[rows] = probabilities(best, frozenset((k,)), rows)
    return out, chosen


def main() -> None:
    parser = common.script_parser(__doc__)
    parser.add_argument("--seeds", type=int, nargs="+", default=[16, 17, 18, 19, 20])
    args = parser.parse_args()
    lines = []
    nested, plain = [], []
    for seed in args.seeds:
        pairs.SEED = seed
        data = pairs.dev_set()
        table = calibrate.build_table(data, "output_relevance")
        y = np.array([r.human for r in data.human["output_relevance"]], dtype=float)
        probs, chosen = nested_probabilities(table, y)
        shipped = calibrate.out_of_fold(table)[: table.n_human]
        nested.append(roc_auc_score(y, (probs >= 0.5).mean(axis=1)))
        plain.append(roc_auc_score(y, (shipped >= 0.5).mean(axis=1)))
        picks = "; ".join("/".join(f"{p[c]:.2f}" for c in VARIED) for p in chosen)
        lines.append(
            f"| {seed} | {nested[-1]:.3f} | {roc_auc_score(y, probs.mean(axis=1)):.3f} "
            f"| {plain[-1]:.3f} | {picks} |"
        )
        print(lines[-1], flush=True)
    shipped_priors = ", ".join(f"{c} {v}" for c, v in HUMAN_PRIOR.items())
    body = (
        __doc__.split("\n\n    python")[0]
        + "\n\n`python bench/priors.py`; rows: haluquestqa/relevance (698 dev rows), out-of-fold.\n\n"
        + "| damage draw (seed) | score AUROC, priors chosen without the fold (nested) "
        "| mean follow_probability AUROC, nested "
        f"| score AUROC, shipped priors ({shipped_priors}; chosen by watching it) "
        f"| priors chosen per fold ({'/'.join(VARIED)}) |\n|---|---|---|---|---|\n"
        + "\n".join(lines)
        + f"\n\nNested: mean {statistics.mean(nested):.3f}, range {min(nested):.3f}–{max(nested):.3f}. "
        f"Shipped priors: mean {statistics.mean(plain):.3f}, range {min(plain):.3f}–{max(plain):.3f}.\n"
    )
    if not args.no_write:
        common.write_section("Relevance priors chosen blind", body)


if __name__ == "__main__":
    main()
