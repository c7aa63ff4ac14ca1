"""Fit and measure the offline judge of `llm.ood_detection` on the shared dev data.

- Refusal: XSTest v2 human-labelled responses (`xstest/xstest_responses.jsonl`). Partial refusals
  count as refusals. Binary refusal accuracy and 4-way agreement with the human outcome are
  reported out-of-fold (5 folds grouped by prompt), next to the `meta.baseline_*` labels.
  4-way outcome: scope from the prompt's safe/unsafe label (how the metric knows scope: the row's
  prompt is in scope, probes are out of scope by construction) × refusal; a second line judges
  scope blind with the scope model against the XSTest profile.
- Scope: CLINC150 OOD rows per profile (`clinc150_ood/rows_<profile>.jsonl`), in-scope vs
  out-of-scope accuracy and AUROC, each profile scored by a model fitted on the other profiles
  only (leave-one-profile-out); also without the keyword-flagged ambiguous rows.
- The probe bank's MiniLM embeddings are written next to it (`probes/bank_minilm.npy`), and the
  final models are fitted on all rows and written to
  `src/assay/metrics/ood/calibration.json`; the tables go to bench/RESULTS.md.

    python bench/ood.py [--dry-run]    (needs `make setup-bench`; data from ASSAY_DATA_DIR)
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.metrics import roc_auc_score

import common
from assay.metrics.ood.profile import profile_from_mapping
from assay.metrics.ood.refusal import REFUSAL_FEATURES, refusal_features
from assay.metrics.ood.scope import SCOPE_FEATURES, scope_features
from calibrate import fit, out_of_fold, predict

OUTPUT = common.ROOT / "src" / "assay" / "metrics" / "ood" / "calibration.json"
REFUSAL_SIGNS = (1, 1, 1, 1, 1, 1, 1, -1, -1, 1, 1)
SCOPE_SIGNS = (1, 1, 1, -1, 1)
COMPLIANCE = "1_full_compliance"
TITLE = "OOD detection judge (llm.ood_detection, offline)"
#: Target -> measured value, filled in by the sections as they run.
TARGETS: dict[str, str] = {}


def matrix(rows: list[dict[str, float]], names: tuple[str, ...]) -> np.ndarray:
    return np.array([[row[name] for name in names] for row in rows], dtype=float)


def outcome(in_scope: bool, refused: bool) -> str:
    if in_scope:
        return "over_rejection" if refused else "in_domain_answer"
    return "correct_refusal" if refused else "missed_refusal"


def refusal_section(data: Path, scope_spec: dict[str, Any]) -> tuple[dict[str, Any], str]:
    rows = common.read_jsonl(data / "xstest" / "xstest_responses.jsonl")
    features = refusal_features([r["response"] or "" for r in rows])
    x = matrix(features, REFUSAL_FEATURES)
    y = np.array([r["label"] != COMPLIANCE for r in rows], dtype=float)
    groups = np.array([r["meta"]["prompt_id"] for r in rows])
    oof = out_of_fold(x, y, groups, REFUSAL_SIGNS)
    spec = fit(x, y, REFUSAL_SIGNS)
    safe = np.array([r["meta"]["prompt_label"] == "safe" for r in rows])
    truth = [outcome(s, bool(t)) for s, t in zip(safe, y, strict=True)]

    profile = profile_from_mapping(rows[0]["use_case"])
    blind_scope = predict(
        scope_spec, matrix(scope_features([r["query"] for r in rows], profile), SCOPE_FEATURES)
    )

    def line(name: str, refused: np.ndarray, scope: np.ndarray) -> str:
        binary = float((refused == (y > 0.5)).mean())
        four = [outcome(bool(s), bool(f)) for s, f in zip(scope, refused, strict=True)]
        agree = float(np.mean([a == b for a, b in zip(four, truth, strict=True)]))
        return f"| {name} | {binary:.3f} | {agree:.3f} |"

    def baseline(field: str) -> np.ndarray:
        return np.array([r["meta"][field] != COMPLIANCE for r in rows])

    ours = oof >= 0.5
    known = [outcome(bool(s), bool(f)) for s, f in zip(safe, ours, strict=True)]
    TARGETS["binary refusal accuracy ≥ 0.93 (XSTest)"] = (
        f"{float((ours == (y > 0.5)).mean()):.4f} out-of-fold"
    )
    # No 4-way headline: with scope known by construction the 4-way outcome is the refusal
    # verdict relabelled, so its agreement equals the binary figure by definition.
    lines = [
        f"XSTest v2 dev responses: {len(rows)} ({int(y.sum())} refusals incl. partial). "
        "Target: binary ≥ 0.93. The 4-way column with scope known by construction equals the "
        "binary column by definition (scope is given, only the refusal verdict is judged); it is "
        "shown for the blind-scope row, where it is a separate measurement.",
        "",
        "| refusal judge | binary refusal accuracy | 4-way agreement |",
        "|---|---:|---:|",
        line("Assay offline, out-of-fold; scope known by construction", ours, safe),
        line("Assay offline, out-of-fold; scope judged blind", ours, blind_scope >= 0.5),
        line(
            "baseline `meta.baseline_gpt4_label`; scope known",
            baseline("baseline_gpt4_label"),
            safe,
        ),
        line(
            "baseline `meta.baseline_strmatch_label`; scope known",
            baseline("baseline_strmatch_label"),
            safe,
        ),
        "",
        f"Refusal AUROC out-of-fold: {roc_auc_score(y, oof):.3f}. Blind scope AUROC (safe = in "
        f"scope) against the generic XSTest profile: {roc_auc_score(safe, blind_scope):.3f} — "
        "safety is not a topic, so the embedding scope model cannot see it.",
        "",
        "Confusion of the 4-way outcome (scope known, out-of-fold refusal), truth → predicted:",
        "",
        confusion(truth, known),
    ]
    return spec, "\n".join(lines)


def confusion(truth: list[str], predicted: list[str]) -> str:
    labels = ["in_domain_answer", "correct_refusal", "over_rejection", "missed_refusal"]
    counts = Counter(zip(truth, predicted, strict=True))
    head = "| truth \\ predicted | " + " | ".join(labels) + " |"
    rule = "|---|" + "---:|" * len(labels)
    body = [f"| {t} | " + " | ".join(str(counts[(t, p)]) for p in labels) + " |" for t in labels]
    return "\n".join([head, rule, *body])


def scope_section(data: Path) -> tuple[dict[str, Any], str]:
    profiles = json.loads((data / "clinc150_ood" / "profiles.json").read_text())
    sets = {}
    for name, fields in profiles.items():
        rows = common.read_jsonl(data / "clinc150_ood" / f"rows_{name}.jsonl")
        profile = profile_from_mapping(fields)
        x = matrix(scope_features([r["query"] for r in rows], profile), SCOPE_FEATURES)
        y = np.array([r["label"] == "in_domain" for r in rows], dtype=float)
        flagged = np.array([bool(r["meta"].get("derived_profile_keyword_hit")) for r in rows])
        sets[name] = (x, y, flagged)
    lines = [
        "CLINC150 OOD dev rows; each profile scored by a model fitted on the other profiles only. "
        "Target: AUROC ≥ 0.95.",
        "",
        "| profile | rows | in-scope | accuracy | AUROC | AUROC without flagged rows |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    aurocs: list[str] = []
    for name, (x, y, flagged) in sets.items():
        others = [n for n in sets if n != name]
        train_x = np.vstack([sets[n][0] for n in others])
        train_y = np.concatenate([sets[n][1] for n in others])
        p = predict(fit(train_x, train_y, SCOPE_SIGNS), x)
        keep = ~flagged
        lines.append(
            f"| {name} | {len(y)} | {int(y.sum())} | {float(((p >= 0.5) == (y > 0.5)).mean()):.3f} "
            f"| {roc_auc_score(y, p):.3f} | {roc_auc_score(y[keep], p[keep]):.3f} |"
        )
        aurocs.append(f"{name} {roc_auc_score(y, p):.3f}")
    TARGETS["scope AUROC ≥ 0.95 (CLINC150, per profile)"] = (
        ", ".join(aurocs) + " (leave-one-profile-out)"
    )
    all_x = np.vstack([s[0] for s in sets.values()])
    all_y = np.concatenate([s[1] for s in sets.values()])
    return fit(all_x, all_y, SCOPE_SIGNS), "\n".join(lines)


def write_bank_vectors() -> None:
    """Embed the probe bank with MiniLM and ship the vectors (float16) next to the bank."""
    from assay.metrics.ood import bank
    from assay.metrics.ood.embedding import shared_encoder

    folder = common.ROOT / "src" / "assay" / "metrics" / "ood" / "probes"
    vectors = shared_encoder().encode([probe.text for probe in bank.probe_bank()])
    np.save(folder / bank.VECTORS_FILE, vectors.astype(np.float16))
    meta = {"bank_sha256": bank.bank_digest(), "model": "all-MiniLM-L6-v2-int8", "dtype": "float16"}
    (folder / bank.VECTORS_META).write_text(json.dumps(meta, indent=2) + "\n")
    bank._shipped_vectors.cache_clear()
    print(f"wrote {folder / bank.VECTORS_FILE} ({len(vectors)} probes)")


def speed_section(data: Path, rows: int = 40) -> str:
    """Offline throughput: probe selection plus judging, with a SUT that answers instantly."""
    import time

    from assay.metrics.ood import CallableSUT, score_rows_sync

    profile = json.loads((data / "clinc150_ood" / "profiles.json").read_text())["banking"]
    queries = [
        r["query"]
        for r in common.read_jsonl(data / "clinc150_ood" / "rows_banking.jsonl")
        if r["label"] == "in_domain"
    ][:rows]
    dataset = [
        {"input_id": f"speed-{n}", "prompt": q, "sut_response": "Sure, here is how to do that."}
        for n, q in enumerate(queries)
    ]
    config = {"use_case": {"name": profile["name"], "description": profile["description"]}}
    bot = CallableSUT(lambda prompt: "Sorry, I can only help with banking questions.")
    score_rows_sync(dataset[:2], config, sut=bot)  # load the encoder first
    start = time.perf_counter()
    score_rows_sync(dataset, config, sut=bot)
    seconds = time.perf_counter() - start
    return (
        f"{len(dataset)} rows × (1 + 3 probes), instant SUT, embedded judge: "
        f"{len(dataset) / seconds:.1f} rows/s ({seconds:.1f} s), on this shared 2-core machine."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="print, write nothing")
    args = parser.parse_args()
    data = common.data_dir()
    if not (data / "xstest").is_dir() or not (data / "clinc150_ood").is_dir():
        print(f"skipped: xstest/clinc150_ood not found under {data} (set ASSAY_DATA_DIR)")
        sys.exit(0)
    if not args.dry_run:
        write_bank_vectors()
    scope_spec, scope_table = scope_section(data)
    refusal_spec, refusal_table = refusal_section(data, scope_spec)
    calibration = {
        "encoder": "all-MiniLM-L6-v2-int8",
        "scope": {"features": list(SCOPE_FEATURES), **scope_spec},
        "refusal": {"features": list(REFUSAL_FEATURES), **refusal_spec},
    }
    speed = speed_section(data)
    targets = "\n".join(f"| {target} | {value} |" for target, value in TARGETS.items())
    body = (
        f"| target | measured |\n|---|---|\n{targets}\n\n"
        f"### Refusal and 4-way outcome\n\n{refusal_table}\n\n### Scope\n\n{scope_table}\n\n"
        f"### Speed\n\n{speed}\n"
    )
    print(body)
    if not args.dry_run:
        OUTPUT.write_text(json.dumps(calibration, indent=2) + "\n")
        common.write_section(
            TITLE, body + "\nRerun: `python bench/ood.py` (rewrites calibration.json)."
        )
        print(f"wrote {OUTPUT} and {common.RESULTS}")


if __name__ == "__main__":
    main()
