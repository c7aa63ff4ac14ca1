"""Fit the embedded judge's calibration on the dev data and write calibration.json.

Each instruction gets a logistic model over its own evidence features (see
`assay.judges.embedded.signals.CHECK_FEATURES`). The dev data has response-level labels, not
per-instruction ones, so every instruction of a detector is fitted to that detector's label:
- output_relevance: haluquestqa relevance, followed = no expert-flagged irrelevant span;
- completeness: haluquestqa completeness (followed = no flagged incomplete span; the question
  stands in as context) plus ragchecker pairs (the more complete response of a non-tie pair
  = followed, the other = not).
Out-of-fold (5-fold) AUROC and ECE are printed so the fit can be judged on data it did not see.

    python bench/calibrate.py [--encoder minilm|e5] [--dry-run]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import minimize
from sklearn.metrics import roc_auc_score

import common
from assay.detectors import DETECTORS
from assay.judges.embedded.signals import feature_names, feature_signs

OUTPUT = common.ROOT / "src" / "assay" / "judges" / "embedded" / "calibration.json"
#: Inverse L2 strength: features are few and standardised, so a mild penalty suffices.
REGULARISATION = 1.0
PAIRS = [0]  # how many ragchecker pairs the completeness set ends with (set by training_sets)


def training_sets(encoder: str) -> dict[str, tuple[list[dict[str, float]], np.ndarray, np.ndarray]]:
    """detector -> (feature rows, outcomes, group ids for folds)."""
    rel = common.relevance_rows()
    rel_features = common.features(
        encoder, "output_relevance", ((r["query"], r["response"], r["context"]) for r in rel)
    )
    comp = common.completeness_rows()
    comp_features = common.features(
        encoder, "completeness", ((r["query"], r["response"], r["context"]) for r in comp)
    )
    pairs = [p for p in common.pairwise_rows() if p["label"] != 0]
    PAIRS[:] = [len(pairs)]
    a = common.features(
        encoder, "completeness", ((p["query"], p["a"], p["context"]) for p in pairs)
    )
    b = common.features(
        encoder, "completeness", ((p["query"], p["b"], p["context"]) for p in pairs)
    )
    pair_rows, pair_outcomes = [], []
    for p, fa, fb in zip(pairs, a, b, strict=True):
        pair_rows += [fa, fb]
        pair_outcomes += [p["label"] < 0, p["label"] > 0]
    return {
        "output_relevance": (
            rel_features,
            np.array([r["positive"] for r in rel], float),
            np.arange(len(rel)) // 2,
        ),
        "completeness": (
            comp_features + pair_rows,
            np.array([r["positive"] for r in comp] + pair_outcomes, float),
            np.concatenate([np.arange(len(comp)) // 2, 10_000 + np.arange(len(pair_rows)) // 2]),
        ),
    }


def fit(
    x: np.ndarray, y: np.ndarray, signs: tuple[int, ...], weights: np.ndarray | None = None
) -> dict[str, Any]:
    """L2-regularised logistic regression whose weights keep the declared signs.

    weights: optional per-row weights of the loss (default: every row counts once).
    """
    rows = np.ones(len(y)) if weights is None else weights
    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale[scale < 1e-9] = 1.0
    z = (x - mean) / scale

    def loss(params: np.ndarray) -> tuple[float, np.ndarray]:
        logits = params[0] + z @ params[1:]
        p = 1.0 / (1.0 + np.exp(-logits))
        value = (rows * (np.logaddexp(0, logits) - y * logits)).sum()
        value += 0.5 * (params[1:] ** 2).sum() / REGULARISATION
        grad_logits = rows * (p - y)
        grad = np.concatenate(
            [[grad_logits.sum()], z.T @ grad_logits + params[1:] / REGULARISATION]
        )
        return float(value), grad

    bounds = [(None, None)] + [(0, None) if s > 0 else (None, 0) for s in signs]
    result = minimize(loss, np.zeros(len(signs) + 1), jac=True, method="L-BFGS-B", bounds=bounds)
    return {
        "mean": mean.round(6).tolist(),
        "scale": scale.round(6).tolist(),
        "weights": result.x[1:].round(6).tolist(),
        "bias": round(float(result.x[0]), 6),
    }


def predict(spec: dict[str, Any], x: np.ndarray) -> np.ndarray:
    z = spec["bias"] + ((x - np.array(spec["mean"])) / np.array(spec["scale"])) @ np.array(
        spec["weights"]
    )
    return 1.0 / (1.0 + np.exp(-z))


def out_of_fold(
    x: np.ndarray, y: np.ndarray, groups: np.ndarray, signs: tuple[int, ...]
) -> np.ndarray:
    """Probabilities for each row from a model that never saw the row (or its pair)."""
    oof = np.zeros(len(y))
    unique = np.unique(groups)
    rng = np.random.default_rng(0)
    fold_of = dict(zip(unique, rng.permutation(len(unique)) % 5, strict=True))
    folds = np.array([fold_of[g] for g in groups])
    for k in range(5):
        test = folds == k
        oof[test] = predict(fit(x[~test], y[~test], signs), x[test])
    return oof


def calibrate(encoder: str) -> tuple[dict[str, Any], dict[str, dict[str, np.ndarray]]]:
    """Fitted calibration (all data) and out-of-fold probabilities per detector and check."""
    calibration: dict[str, Any] = {"encoder": encoder, "checks": {}}
    oof: dict[str, dict[str, np.ndarray]] = {}
    for detector, (rows, y, groups) in training_sets(encoder).items():
        oof[detector] = {"_outcome": y}
        if detector == "completeness":
            pair_outcomes = y[len(y) - 2 * PAIRS[0] :: 2]
            oof[detector]["_pairs"] = pair_outcomes == 0  # a lost: b is more complete
        for instruction in DETECTORS[detector].instructions:
            names, signs = feature_names(instruction.check), feature_signs(instruction.check)
            x = common.matrix(rows, names)
            calibration["checks"][instruction.check] = {"features": list(names), **fit(x, y, signs)}
            oof[detector][instruction.check] = out_of_fold(x, y, groups, signs)
    return calibration, oof


def detector_summary(oof: dict[str, dict[str, np.ndarray]]) -> str:
    """Detector-level out-of-fold quality: what the shipped detectors would score on unseen rows."""
    lines = ["| detector | measure | out-of-fold value |", "|---|---|---|"]
    for detector, columns in oof.items():
        y = columns["_outcome"]
        probs = np.array([p for check, p in columns.items() if not check.startswith("_")])
        mean_p, score = probs.mean(axis=0), (probs >= 0.5).mean(axis=0)
        lines.append(
            f"| {detector} | AUROC of mean follow_probability | {roc_auc_score(y, mean_p):.3f} |"
        )
        lines.append(f"| {detector} | AUROC of score | {roc_auc_score(y, score):.3f} |")
        lines.append(
            f"| {detector} | ECE of follow_probability | {common.expected_calibration_error(probs.ravel(), np.tile(y, len(probs))):.3f} |"
        )
        if detector == "completeness":
            n_pairs = len(columns["_pairs"]) if "_pairs" in columns else 0
            if n_pairs:
                ranked = score + 1e-3 * mean_p  # score decides; mean probability breaks ties
                a, b = ranked[-2 * n_pairs :: 2], ranked[-2 * n_pairs + 1 :: 2]
                accuracy = ((b > a) == columns["_pairs"]).mean()
                lines.append(
                    f"| completeness | ragchecker pairwise accuracy (non-tie pairs) | {accuracy:.3f} |"
                )
    return "\n".join(lines)


def report(oof: dict[str, dict[str, np.ndarray]]) -> str:
    lines = [
        "| detector | instruction check | out-of-fold AUROC | out-of-fold ECE |",
        "|---|---|---|---|",
    ]
    for detector, columns in oof.items():
        y = columns["_outcome"]
        for check, p in columns.items():
            if not check.startswith("_"):
                lines.append(
                    f"| {detector} | {check} | {roc_auc_score(y, p):.3f} | {common.expected_calibration_error(p, y):.3f} |"
                )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--encoder", default="minilm", choices=["minilm", "e5"])
    parser.add_argument(
        "--dry-run", action="store_true", help="print, do not write calibration.json"
    )
    args = parser.parse_args()
    calibration, oof = calibrate(args.encoder)
    table = detector_summary(oof) + "\n\n" + report(oof)
    print(table)
    if not args.dry_run:
        Path(OUTPUT).write_text(json.dumps(calibration, indent=1) + "\n")
        print(f"wrote {OUTPUT.relative_to(common.ROOT)}")
        common.write_section(
            f"Calibration fit ({args.encoder})",
            "`python bench/calibrate.py` — 5-fold out-of-fold quality of each instruction's "
            "calibrated probability against its detector's response-level dev label.\n\n" + table,
        )


if __name__ == "__main__":
    main()
