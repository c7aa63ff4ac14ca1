"""Fit the embedded judge's calibration on the dev data and write calibration.json.

Each instruction gets a sign-constrained logistic model over its own evidence features (see
`assay.judges.embedded.signals.CHECK_FEATURES`), supervised by two kinds of rows:
- human labels, which are per response, not per instruction: haluquestqa "no irrelevant span"
  for the output_relevance checks; for completeness, the more complete answer (1) and the less
  complete one (0) of each non-tie ragchecker pair, and haluquestqa "no incomplete span";
- damage pairs (`bench/pairs.py`): a good answer (1) and a copy broken in a way this instruction
  names (0), which is where contradiction, structure and explanation checks get their signal.
Human rows are weighted so that both classes weigh the same (except prioritize_relevant, 0.35 :
0.65 followed : broken, and no_tangents, 0.65 : 0.35: `HUMAN_PRIOR`, so that the relevance labels
flip at different points), and human and damage rows share each check's weight as `HUMAN_SHARE`
says: a probability of 0.5 is the point where the evidence for "broken" and "followed" balance
under those weights, which is where a label should flip.

Everything is reported out-of-fold: five folds by question group, a fold's rows (and the damaged
copies made from them) never in the fit that scores them. The shipped model is fitted on all rows.
Per instruction it also gives the ECE a perfectly calibrated model would show on the same rows
and weights (outcomes drawn from its own probabilities: the noise floor of that figure), and, for
completeness, how often its labels favour the more and the less complete answer of ragchecker's
pairs (an instruction whose labels lean neither way only dilutes the score there).
Two rows per detector are not results but context: how far the label contract lets the
completeness score rank ragchecker's pairs (`label_ceiling`), and how much of haluquestqa's
relevance labels is who wrote the answer.

    python bench/calibrate.py [--dry-run]
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import minimize
from sklearn.isotonic import IsotonicRegression
from sklearn.metrics import roc_auc_score

import common
from assay.detectors import DETECTORS
from assay.judges.embedded.agreement_model import MODEL_FILE
from assay.judges.embedded.calibration import recalibrate
from assay.judges.embedded.signals import feature_names, feature_signs
from common import pairwise
from pairs import FOLDS, DevSet, Row, dev_set, fold_of

OUTPUT = common.ROOT / "src" / "assay" / "judges" / "embedded" / "calibration.json"
ENCODER = "minilm"
#: Inverse L2 strength on standardised features.
REGULARISATION = 1.0
#: Weight of haluquestqa completeness rows (question as context; a weak label) in the
#: completeness human part, relative to ragchecker pair members.
HQ_COMPLETENESS_WEIGHT = 0.5
#: Share of a check's total weight carried by human-labelled rows when it also has damage pairs.
#: Checks whose human label measures them closely lean on it (a strict threshold that ranks real
#: answers); the others lean on the damage pairs (a threshold between real and broken answers).
#: Chosen by watching the out-of-fold figures of this script and bench/sanity.py.
HUMAN_SHARE = {
    "core_intent": 0.3,
    "prioritize_relevant": 0.7,
    "no_tangents": 0.7,
    "no_misinterpretation": 0.3,
    "query_aspects": 0.3,
    "key_information": 0.5,
    "no_omissions": 0.2,
    "faithful_interpretation": 0.05,
    "clear_structure": 0.2,
    "explains_when_needed": 0.2,
    "no_contradiction": 0.05,
    "accurate_and_focused": 0.2,
}
#: Share of the human rows' weight carried by the "followed" class (0.5 elsewhere). The
#: relevance checks all learn from one human label per answer, so with equal priors their labels
#: flip together and the 4-label score is nearly always 0 or 1. A stricter prioritize_relevant and
#: a more lenient no_tangents flip at different points, so the score ranks answers. Chosen by
#: watching the out-of-fold score AUROC and bench/sanity.py's tangent pairs (a nested choice,
#: made on each fold's other four folds only, is reported beside it in "Calibration fit").
HUMAN_PRIOR = {
    "prioritize_relevant": 0.35,
    "no_tangents": 0.65,
}


@dataclass
class Table:
    """One detector's rows (human, then damage) with their features, folds and supervision."""

    detector: str
    rows: list[Row]
    features: list[dict[str, float]]
    folds: np.ndarray
    n_human: int
    #: check -> (row indices, targets, weights)
    supervision: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]


#: Which ragchecker human judgement supervises each completeness check (the others use
#: completeness, plus haluquestqa's incomplete spans).
JUDGED_BY = {
    "faithful_interpretation": "correctness",
    "no_contradiction": "correctness",
    "accurate_and_focused": "correctness",
    "clear_structure": "overall",
    "explains_when_needed": "overall",
}


def _human_targets(
    data: DevSet, detector: str, check: str
) -> tuple[list[int], list[float], list[float]]:
    rows = data.human[detector]
    if detector == "output_relevance":
        return list(range(len(rows))), [r.human or 0.0 for r in rows], [1.0] * len(rows)
    judgement = JUDGED_BY.get(check, "completeness")
    index, y, w = [], [], []
    for a, b, judged in data.human_pairs:
        if judged[judgement] == 0:
            continue
        index += [a, b]
        y += [float(judged[judgement] < 0), float(judged[judgement] > 0)]
        w += [1.0, 1.0]
    if judgement != "completeness":
        return index, y, w
    for i, r in enumerate(rows):
        if r.source == "haluquestqa" and r.human is not None:
            index.append(i)
            y.append(r.human)
            w.append(HQ_COMPLETENESS_WEIGHT)
    return index, y, w


def balanced(y: np.ndarray, w: np.ndarray, total: float, followed: float = 0.5) -> np.ndarray:
    """Weights rescaled so the class "followed" (1) sums to total * followed and the other
    class to the rest."""
    out = w.copy()
    for cls, share in ((0.0, 1 - followed), (1.0, followed)):
        mask = y == cls
        if mask.any():
            out[mask] *= total * share / w[mask].sum()
    return out


#: The agreement model is cross-fitted: each fold's rows are read by a model trained on the
#: other four folds (`bench/train_agreement.py --folds ...`), never by one that saw them. Four
#: fifths of the data is as close as cross-fitting gets to the shipped model, trained on all five,
#: so the shipped calibration is fitted on evidence like the shipped model's. The five models are
#: kept packed in the repository (`bench/pack_agreement.py --out-dir`).
MODELS = common.ROOT / "bench" / "models"


def agreement_model_for(fold: int) -> Path:
    """The packed agreement model that reads `fold` (never one trained on it)."""
    other = sorted(set(range(FOLDS)) - {fold})
    path = MODELS / f"folds{''.join(map(str, other))}" / MODEL_FILE
    if not path.exists():
        raise SystemExit(
            f"{path} is missing: train it with `make train-agreement` (see bench/train_agreement.py)"
        )
    return path


def cross_fitted_features(detector: str, rows: list[Row]) -> list[dict[str, float]]:
    if detector == "output_relevance":  # reads no sentence pairs
        return common.features(ENCODER, detector, ((r.query, r.response, r.context) for r in rows))
    out: list[dict[str, float] | None] = [None] * len(rows)
    for fold in range(FOLDS):
        index = [i for i, r in enumerate(rows) if r.fold == fold]
        items = ((rows[i].query, rows[i].response, rows[i].context) for i in index)
        model = agreement_model_for(fold)
        for i, f in zip(index, common.features(ENCODER, detector, items, model), strict=True):
            out[i] = f
    return [f for f in out if f is not None]


def build_table(data: DevSet, detector: str) -> Table:
    human, damaged = data.human[detector], data.damage[detector]
    rows = human + damaged
    feats = cross_fitted_features(detector, rows)
    supervision = {}
    for instruction in DETECTORS[detector].instructions:
        check = instruction.check
        h_index, h_y, h_w = _human_targets(data, detector, check)
        y_h, w_h = np.array(h_y), np.array(h_w)
        d_index = [
            len(human) + i for i, r in enumerate(damaged) if check in _targets(r.kind, detector)
        ]
        y_d = np.array([0.0 if rows[i].damaged else 1.0 for i in d_index])
        # Each kind of damage weighs the same for a check, however many pairs it has.
        kinds = Counter(rows[i].kind for i in d_index)
        w_d = np.array([len(d_index) / (len(kinds) * kinds[rows[i].kind]) for i in d_index])
        total = len(h_index) + len(d_index)
        human_share = HUMAN_SHARE[check] if d_index else 1.0
        parts = [balanced(y_h, w_h, total * human_share, HUMAN_PRIOR.get(check, 0.5))]
        if d_index:
            parts.append(balanced(y_d, w_d, total * (1 - human_share)))
        supervision[check] = (
            np.array(h_index + d_index),
            np.concatenate([y_h, y_d]),
            np.concatenate(parts),
        )
    folds = np.array([r.fold for r in rows])
    return Table(detector, rows, feats, folds, len(human), supervision)


def _targets(kind: str, detector: str) -> tuple[str, ...]:
    import damage

    return damage.KIND_BY_NAME[kind].targets.get(detector, ())


def fit(
    x: np.ndarray, y: np.ndarray, signs: tuple[int, ...], weights: np.ndarray | None = None
) -> dict[str, Any]:
    """L2-regularised logistic regression whose weights keep the declared signs.

    weights: optional per-row weights of the loss (default: every row counts once).
    """
    w = np.ones(len(y)) if weights is None else weights
    mean = np.average(x, axis=0, weights=w)
    scale = np.sqrt(np.average((x - mean) ** 2, axis=0, weights=w))
    scale[scale < 1e-9] = 1.0
    z = (x - mean) / scale
    w = w / w.mean()

    def loss(params: np.ndarray) -> tuple[float, np.ndarray]:
        logits = params[0] + z @ params[1:]
        p = 1.0 / (1.0 + np.exp(-logits))
        value = (w * (np.logaddexp(0, logits) - y * logits)).sum()
        value += 0.5 * (params[1:] ** 2).sum() / REGULARISATION
        grad_logits = w * (p - y)
        grad = np.concatenate(
            [[grad_logits.sum()], z.T @ grad_logits + params[1:] / REGULARISATION]
        )
        return float(value), grad

    bounds = [(None, None)] + [(0, None) if s > 0 else (None, 0) for s in signs]
    result = minimize(loss, np.zeros(len(signs) + 1), jac=True, method="L-BFGS-B", bounds=bounds)
    spec = {
        "mean": mean.round(6).tolist(),
        "scale": scale.round(6).tolist(),
        "weights": result.x[1:].round(6).tolist(),
        "bias": round(float(result.x[0]), 6),
    }
    return spec


def curve(z: np.ndarray, y: np.ndarray, w: np.ndarray) -> dict[str, list[float]]:
    """A monotone recalibration of the logit: isotonic regression of the outcome on z, whose
    blocks become knots (block's mean z, block's rate); linear between them."""
    keep = w > 0
    z, y, w = z[keep], y[keep], w[keep]
    iso = IsotonicRegression(y_min=0.002, y_max=0.998, out_of_bounds="clip")
    fitted = iso.fit(z, y, sample_weight=w).predict(z)
    knots_z, knots_p = [], []
    for value in np.unique(fitted):
        block = fitted == value
        knots_z.append(float(np.average(z[block], weights=w[block])))
        knots_p.append(float(value))
    if len(knots_z) < 2:
        return {}
    return {"curve_z": np.round(knots_z, 5).tolist(), "curve_p": np.round(knots_p, 5).tolist()}


def logit(spec: dict[str, Any], x: np.ndarray) -> np.ndarray:
    return spec["bias"] + ((x - np.array(spec["mean"])) / np.array(spec["scale"])) @ np.array(
        spec["weights"]
    )


def predict(spec: dict[str, Any], x: np.ndarray) -> np.ndarray:
    z = logit(spec, x)
    if spec.get("curve_z"):
        return recalibrate(z, spec["curve_z"], spec["curve_p"])
    return 1.0 / (1.0 + np.exp(-np.clip(z, -40, 40)))


def fit_check(table: Table, check: str, train: np.ndarray) -> dict[str, Any]:
    index, y, w = table.supervision[check]
    keep = train[table.folds[index]]
    x = common.matrix([table.features[i] for i in index[keep]], feature_names(check))
    spec = fit(x, y[keep], feature_signs(check), w[keep])
    return spec | curve(logit(spec, x), y[keep], w[keep])


def grouped_out_of_fold(
    x: np.ndarray, y: np.ndarray, groups: np.ndarray, signs: tuple[int, ...]
) -> np.ndarray:
    """Out-of-fold probabilities of a plain fit (no curve), five folds by group."""
    folds = np.array([fold_of(str(g)) for g in groups])
    out = np.zeros(len(y))
    for k in range(FOLDS):
        test = folds == k
        out[test] = predict(fit(x[~test], y[~test], signs), x[test])
    return out


def fold_fits(table: Table) -> list[dict[str, dict[str, Any]]]:
    """For each fold k, every check's calibration fitted without fold k."""
    checks = [i.check for i in DETECTORS[table.detector].instructions]
    return [
        {check: fit_check(table, check, np.arange(FOLDS) != k) for check in checks}
        for k in range(FOLDS)
    ]


def out_of_fold(
    table: Table,
    features: list[dict[str, float]] | None = None,
    fits: list[dict[str, dict[str, Any]]] | None = None,
) -> np.ndarray:
    """P(followed) for every row and check, each from a model fitted without the row's fold.

    features: other features for the table's first rows, in order (the same rows read another
    way, as `distractors.py` does); fits: `fold_fits(table)`, when already made."""
    features = table.features if features is None else features
    folds = table.folds[: len(features)]
    fits = fits or fold_fits(table)
    checks = [i.check for i in DETECTORS[table.detector].instructions]
    out = np.zeros((len(features), len(checks)))
    for k in range(FOLDS):
        test = folds == k
        rows = [f for f, t in zip(features, test, strict=True) if t]
        for c, check in enumerate(checks):
            out[test, c] = predict(fits[k][check], common.matrix(rows, feature_names(check)))
    return out


def fit_all(table: Table) -> dict[str, Any]:
    train = np.ones(FOLDS, bool)
    return {
        i.check: {"features": list(feature_names(i.check)), **fit_check(table, i.check, train)}
        for i in DETECTORS[table.detector].instructions
    }


def weighted_ece(p: np.ndarray, y: np.ndarray, w: np.ndarray, bins: int = 10) -> float:
    which = np.clip((p * bins).astype(int), 0, bins - 1)
    total = 0.0
    for b in range(bins):
        m = which == b
        if m.any():
            total += w[m].sum() * abs(
                np.average(p[m], weights=w[m]) - np.average(y[m], weights=w[m])
            )
    return float(total / w.sum())


def ragchecker_sides(data: DevSet) -> tuple[np.ndarray, np.ndarray]:
    """Row indices of the more and the less complete answer of each non-tie ragchecker pair."""
    decided = [p for p in data.human_pairs if p[2]["completeness"] != 0]
    a, b = np.array([p[0] for p in decided]), np.array([p[1] for p in decided])
    b_wins = np.array([p[2]["completeness"] > 0 for p in decided])
    return np.where(b_wins, b, a), np.where(b_wins, a, b)


#: The completeness measure that ranks ragchecker's pairs best on its own, and the checks that
#: `label_ceiling` replaces with thresholds of it.
COVERAGE_FEATURE = "ctx_word_recall"
COVERAGE_CHECKS = ("key_information", "no_omissions", "query_aspects")
#: Threshold ladders (percentiles of the feature over the human rows) `label_ceiling` tries.
LADDERS = ((50,), (33, 67), (25, 50, 75), (20, 40, 60), (30, 50, 70), (40, 60, 80))


def label_ceiling(table: Table, probs: np.ndarray, data: DevSet) -> tuple[float, float, float]:
    """How far the completeness score can rank ragchecker's pairs under the label contract
    (score = share of eight labels true): the pairwise accuracy of `COVERAGE_FEATURE` itself;
    then of the score whose coverage labels are thresholds of that feature, staggered so that
    each flips at another level, and of those labels alone. Best over `LADDERS`, chosen on the
    pairs themselves: a ceiling of this construction, not a result."""
    better, other = ragchecker_sides(data)
    value = np.array([f[COVERAGE_FEATURE] for f in table.features])
    checks = [i.check for i in DETECTORS[table.detector].instructions]
    columns = [checks.index(c) for c in COVERAGE_CHECKS]
    fitted = probs >= 0.5
    best_score = best_alone = 0.0
    for ladder in LADDERS:
        cuts = np.percentile(value[: table.n_human], ladder)
        ladder_labels = np.stack([value >= cut for cut in cuts], axis=1)
        labels = fitted.copy()
        labels[:, columns[: len(cuts)]] = ladder_labels
        score, alone = labels.mean(axis=1), ladder_labels.mean(axis=1)
        best_score = max(best_score, pairwise(score[better], score[other]))
        best_alone = max(best_alone, pairwise(alone[better], alone[other]))
    return pairwise(value[better], value[other]), best_score, best_alone


def human_table(table: Table, probs: np.ndarray, data: DevSet) -> list[tuple[str, str, str]]:
    """Detector-level figures on the human labels: (data, measure, value)."""
    h = probs[: table.n_human]
    score, mean_p = (h >= 0.5).mean(axis=1), h.mean(axis=1)
    rows = table.rows[: table.n_human]
    out = []
    if table.detector == "output_relevance":
        y = np.array([r.human for r in rows])
        out += [
            ("haluquestqa/relevance", "AUROC of score", f"{roc_auc_score(y, score):.3f}"),
            (
                "haluquestqa/relevance",
                "AUROC of mean follow_probability",
                f"{roc_auc_score(y, mean_p):.3f}",
            ),
        ]
        # The labels follow who wrote the answer: most flagged answers are Reddit ones. How much
        # of the ranking is that, and how much holds among one author's answers?
        authors = common.answer_authors()
        gpt = np.array([authors[r.id] for r in rows])
        within = "; ".join(
            f"{roc_auc_score(y[gpt == side], mean_p[gpt == side]):.3f}" for side in (False, True)
        )
        out += [
            (
                "haluquestqa/relevance",
                "AUROC of the answer's author alone (GPT-4 above Reddit; not a feature)",
                f"{roc_auc_score(y, gpt):.3f}",
            ),
            (
                "haluquestqa/relevance",
                "AUROC of mean follow_probability among Reddit answers; among GPT-4 answers",
                within,
            ),
        ]
    else:
        better, other = ragchecker_sides(data)
        good, worse = score[better], score[other]
        good_m, worse_m = mean_p[better], mean_p[other]
        broken = np.where(good == worse, good_m > worse_m, good > worse)
        out += [
            (
                "ragchecker non-tie pairs",
                "pairwise accuracy of score (ties count 0.5)",
                f"{pairwise(good, worse):.3f}",
            ),
            (
                "ragchecker non-tie pairs",
                "pairwise accuracy of score, ties broken by mean follow_probability",
                f"{broken.mean():.3f}",
            ),
            (
                "ragchecker non-tie pairs",
                "pairwise accuracy of mean follow_probability",
                f"{pairwise(good_m, worse_m):.3f}",
            ),
        ]
        alone, ceiling, coverage_only = label_ceiling(table, probs, data)
        out += [
            (
                "ragchecker non-tie pairs",
                f"pairwise accuracy of `{COVERAGE_FEATURE}` alone (a feature, no fit)",
                f"{alone:.3f}",
            ),
            (
                "ragchecker non-tie pairs",
                "ceiling: score with the three coverage labels replaced by staggered thresholds "
                f"of `{COVERAGE_FEATURE}` (best of {len(LADDERS)} ladders, chosen on these "
                "pairs); those labels alone",
                f"{ceiling:.3f}; {coverage_only:.3f}",
            ),
        ]
        hq = [i for i, r in enumerate(rows) if r.source == "haluquestqa"]
        y = np.array([rows[i].human for i in hq])
        out += [
            (
                "haluquestqa/completeness (question as context)",
                "AUROC of score",
                f"{roc_auc_score(y, score[hq]):.3f}",
            ),
            (
                "haluquestqa/completeness (question as context)",
                "AUROC of mean follow_probability",
                f"{roc_auc_score(y, mean_p[hq]):.3f}",
            ),
        ]
    return out


def ece_floor(p: np.ndarray, w: np.ndarray, draws: int = 300) -> float:
    """The ECE a perfectly calibrated model would show on rows with these probabilities and
    weights (outcomes drawn from p itself): below it, a measured ECE is sampling noise."""
    rng = np.random.default_rng(0)
    return float(
        np.mean([weighted_ece(p, (rng.random(len(p)) < p).astype(float), w) for _ in range(draws)])
    )


def pair_labels(probs: np.ndarray, data: DevSet) -> np.ndarray:
    """Per completeness instruction, over ragchecker's non-tie pairs: the share of pairs whose
    labels favour the more complete answer, and the share that favour the other one."""
    better, other = ragchecker_sides(data)
    labels = probs >= 0.5
    good, worse = labels[better], labels[other]
    return np.stack([(good & ~worse).mean(axis=0), (~good & worse).mean(axis=0)], axis=1)


def check_table(table: Table, probs: np.ndarray, data: DevSet) -> list[tuple[str, ...]]:
    """Per instruction: out-of-fold AUROC and ECE on its own supervision, spread over dev rows,
    and (completeness) which way its labels lean on the ragchecker pairs."""
    out = []
    sides = pair_labels(probs, data) if table.detector == "completeness" else None
    for c, instruction in enumerate(DETECTORS[table.detector].instructions):
        index, y, w = table.supervision[instruction.check]
        p = probs[index, c]
        human = index < table.n_human
        hp = probs[: table.n_human, c]
        out.append(
            (
                instruction.check,
                f"{roc_auc_score(y[human], p[human]):.3f}",
                f"{roc_auc_score(y[~human], p[~human]):.3f}" if (~human).any() else "—",
                f"{weighted_ece(p, y, w):.3f}",
                f"{ece_floor(p, w):.3f}",
                f"{weighted_ece(p[human], y[human], np.ones(human.sum())):.3f}",
                f"{hp.std():.3f}",
                f"{(hp >= 0.5).mean():.2f}",
                "—" if sides is None else f"{sides[c, 0]:.3f} / {sides[c, 1]:.3f}",
            )
        )
    return out


def markdown(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print, do not write calibration.json"
    )
    parser.add_argument(
        "--detector", choices=list(DETECTORS), help="only this one (implies --dry-run)"
    )
    args = parser.parse_args()
    data = dev_set()
    calibration: dict[str, Any] = {"encoder": ENCODER, "checks": {}}
    sections = []
    for detector in [args.detector] if args.detector else DETECTORS:
        table = build_table(data, detector)
        probs = out_of_fold(table)
        calibration["checks"].update(fit_all(table))
        sections.append(
            f"### {detector}\n\n"
            + markdown(("data", "measure", "out-of-fold value"), human_table(table, probs, data))
        )
        sections.append(
            markdown(
                (
                    "instruction",
                    "AUROC, human labels",
                    "AUROC, damage pairs",
                    "ECE, its fit rows (weighted)",
                    "ECE a calibrated model would show on those rows",
                    "ECE, human labels (natural prior)",
                    "std of p over dev rows",
                    "share labelled true",
                    "ragchecker pairs: labels favour the more / less complete answer",
                ),
                check_table(table, probs, data),
            )
        )
    text = "\n\n".join(sections)
    print(text)
    if not args.dry_run and not args.detector:
        Path(OUTPUT).write_text(json.dumps(calibration, indent=1) + "\n")
        print(f"wrote {OUTPUT.relative_to(common.ROOT)}")
        common.write_section("Calibration fit", __doc__.split("\n\n    python")[0] + "\n\n" + text)


if __name__ == "__main__":
    main()
