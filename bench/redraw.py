"""How far the out-of-fold calibration figures move when only the damage draw changes.

The calibration is supervised by damage pairs (`bench/pairs.py`) as well as human labels, and
those pairs are drawn at random per row. This reruns `calibrate.py`'s out-of-fold figures with
the damage drawn from several seeds (the shipped fit uses seed 16) and gives each figure's mean
and range: a change to the judge that moves a figure by less than its range has not been shown
to move it at all, and a target met at one seed only is not met.

    python bench/redraw.py [--seeds 16 17 18 19 20] [--no-write]
"""

from __future__ import annotations

import statistics

import calibrate
import common
import pairs
from assay.detectors import DETECTORS

#: Figures taken from `calibrate.human_table` (data, measure) and their short names.
HEADLINE = {
    ("haluquestqa/relevance", "AUROC of score"): "output_relevance score AUROC",
    ("haluquestqa/relevance", "AUROC of mean follow_probability"): "output_relevance mean AUROC",
    (
        "ragchecker non-tie pairs",
        "pairwise accuracy of score (ties count 0.5)",
    ): "ragchecker pairwise, score",
    (
        "ragchecker non-tie pairs",
        "pairwise accuracy of score, ties broken by mean follow_probability",
    ): "ragchecker pairwise, ties by mean",
}


def figures_for(seed: int) -> dict[str, float]:
    """The headline figures and each instruction's ECE (fit rows) with damage from `seed`."""
    pairs.SEED = seed
    data = pairs.dev_set()
    out: dict[str, float] = {}
    for detector in DETECTORS:
        table = calibrate.build_table(data, detector)
        probs = calibrate.out_of_fold(table)
        for source, measure, value in calibrate.human_table(table, probs, data):
            name = HEADLINE.get((source, measure))
            if name is not None:
                out[name] = float(value)
        for row in calibrate.check_table(table, probs, data):
            out[f"ECE {row[0]}"] = float(row[3])
    return out


def main() -> None:
    parser = common.script_parser(__doc__)
    parser.add_argument("--seeds", type=int, nargs="+", default=[16, 17, 18, 19, 20])
    args = parser.parse_args()
    runs = {}
    for seed in args.seeds:
        runs[seed] = figures_for(seed)
        print(f"seed {seed} done", flush=True)
    names = list(runs[args.seeds[0]])
    header = ["figure", *(f"seed {s}" for s in args.seeds), "mean", "range"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name in names:
        values = [runs[s][name] for s in args.seeds]
        cells = [f"{v:.3f}" for v in values]
        spread = f"{min(values):.3f}–{max(values):.3f}"
        lines.append(f"| {name} | {' | '.join(cells)} | {statistics.mean(values):.3f} | {spread} |")
    text = "\n".join(lines)
    print(text)
    if not args.no_write:
        intro = __doc__.split("\n\n    python")[0]
        common.write_section(
            "Redraw noise (calibration figures by damage seed)", f"{intro}\n\n{text}"
        )


if __name__ == "__main__":
    main()
