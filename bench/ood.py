"""Fit and measure the offline judge of `llm.ood_detection` on the shared dev data.

- Scope (`ood_scope.py`): CLINC150 dev profiles, three more CLINC profiles written from dev rows,
  in-domain-unsupported splits of each (a third of a profile's intents dropped from its list),
  and twelve profiles we wrote from OffTopicEval system prompts with our own labelled queries.
  Every figure is leave-one-profile-out: a profile (with its splits and variants) is scored by
  a model fitted on the other profiles only.
- Refusal (`ood_refusal.py`): XSTest v2 dev replies, 5 folds grouped by prompt.
- Then both models are fitted on all rows and written to `src/assay/metrics/ood/calibration.json`,
  the banks' MiniLM vectors are written next to them, and the "OOD detection judge" section of
  bench/RESULTS.md is replaced. In-sample figures, where shown, say so.

    python bench/ood.py [--dry-run]    (needs `make setup-bench`; data from ASSAY_DATA_DIR)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.metrics import roc_auc_score

import common
import ood_refusal
import ood_scope
from assay.metrics.ood.refusal import REFUSAL_FEATURES
from assay.metrics.ood.scope import SCOPE_FEATURES
from calibrate import predict

OUTPUT = common.ROOT / "src" / "assay" / "metrics" / "ood" / "calibration.json"
TITLE = "OOD detection judge (llm.ood_detection, offline)"
#: Target -> measured value, filled in by the sections as they run.
TARGETS: dict[str, str] = {}


def write_bank_vectors() -> None:
    """Embed both banks with MiniLM and ship the vectors (float16) next to them."""
    from assay.judges.embedded.embedding_cache import shared_encoder
    from assay.metrics.ood import bank, capabilities
    from assay.metrics.ood.vectors import probes_dir, vector_files, vectors_meta

    folder = Path(str(probes_dir()))
    banks = {
        bank.BANK_FILE: [probe.text for probe in bank.probe_bank()],
        capabilities.CAPABILITY_FILE: capabilities.bank_texts(),
    }
    for source, texts in banks.items():
        vectors_name, meta_name = vector_files(source)
        np.save(folder / vectors_name, shared_encoder().encode(texts).astype(np.float16))
        (folder / meta_name).write_text(json.dumps(vectors_meta(source), indent=2) + "\n")
        print(f"wrote {folder / vectors_name} ({len(texts)} texts)")
    bank._shipped_vectors.cache_clear()
    capabilities._shipped_table.cache_clear()


def _row(name: str, scope_set: ood_scope.ScopeSet, f: ood_scope.Figures) -> str:
    inside = int(scope_set.labels.sum())
    return (
        f"| {name} | {len(scope_set.labels)} | {inside} | {f.auroc:.3f} | {f.recall:.3f} "
        f"| {f.false_positive:.3f} |"
    )


def _table(sets: list[ood_scope.ScopeSet], figures: dict[str, ood_scope.Figures]) -> list[str]:
    head = "| profile | queries | in scope | AUROC | in-scope recall at 0.5 | out-of-scope passed at 0.5 |"
    return [
        head,
        "|---|---:|---:|---:|---:|---:|",
        *(_row(s.name, s, figures[s.name]) for s in sets),
    ]


def _near_table(sets: list[ood_scope.ScopeSet], models: dict[str, dict[str, Any]]) -> list[str]:
    """Unsupported-vs-supported AUROC of each CLINC split with and without the held-out queries
    whose intent shares a name word with a listed intent (leave-one-profile-out models)."""
    lines = [
        "| split | held out | of them sharing a word with a listed intent | AUROC | AUROC without them |",
        "|---|---:|---:|---:|---:|",
    ]
    for s in sets:
        assert s.near_listed is not None
        p = predict(models[s.group], s.features)
        keep = ~s.near_listed
        lines.append(
            f"| {s.name} | {int((~s.labels).sum())} | {int(s.near_listed.sum())} "
            f"| {roc_auc_score(s.labels, p):.3f} | {roc_auc_score(s.labels[keep], p[keep]):.3f} |"
        )
    return lines


def _summary(figures: list[ood_scope.Figures]) -> str:
    aurocs = [f.auroc for f in figures]
    return f"mean {np.mean(aurocs):.3f}, lowest {min(aurocs):.3f}"


def scope_section(data: Path) -> tuple[dict[str, object], str]:
    sets = ood_scope.clinc_sets(data) + ood_scope.written_sets(data)
    ood_scope.featurize(sets)
    models = ood_scope.models_without(sets)
    figures = ood_scope.leave_one_profile_out(sets, models)
    held = ood_scope.field_held_out(sets)
    kinds = {k: [s for s in sets if s.kind == k] for k in ("scope", "unsupported", "system_prompt")}
    scope = [figures[s.name] for s in kinds["scope"]]
    meeting = [s.name for s in kinds["scope"] if figures[s.name].auroc >= 0.97]
    TARGETS["scope AUROC ≥ 0.97 on each profile"] = (
        f"{len(meeting)} of {len(scope)} profiles ({_summary(scope)}); below: "
        + ", ".join(
            f"{s.name} {figures[s.name].auroc:.3f}" for s in kinds["scope"] if s.name not in meeting
        )
    )
    recalls = [f.recall for f in scope]
    TARGETS["in-scope recall ≥ 0.90 at the shipped threshold (0.5)"] = (
        f"mean {np.mean(recalls):.3f}, lowest {min(recalls):.3f}; "
        f"{sum(r >= 0.9 for r in recalls)} of {len(recalls)} profiles reach 0.90"
    )
    unsupported = [figures[s.name] for s in kinds["unsupported"]]
    TARGETS["AUROC ≥ 0.85 in-domain unsupported vs supported"] = (
        f"{sum(f.auroc >= 0.85 for f in unsupported)} of {len(unsupported)} sets "
        f"({_summary(unsupported)})"
    )
    held_scope = [held[s.name] for s in kinds["scope"] if s.name in held]
    held_unsupported = [held[s.name] for s in kinds["unsupported"] if s.name in held]
    lines = [
        "Leave-one-profile-out: each profile, with its splits and system-prompt variant, is scored "
        "by a model fitted on the other profiles only. CLINC150: dev profiles `banking`, `travel`; "
        "`auto_and_commute`, `utility`, `work` written the same way from dev rows. The other twelve "
        "were written by us from OffTopicEval system prompts, with our own labelled queries "
        "(`bench/data/ood_profiles.yaml`).",
        "",
        "#### In scope vs out of scope",
        "",
        *_table(kinds["scope"], figures),
        "",
        "#### In the domain but unsupported vs supported",
        "",
        "CLINC splits drop a third of the profile's intents from its list (three seeded splits); "
        "written profiles: in-scope vs same-field unsupported queries.",
        "",
        *_table(kinds["unsupported"], figures),
        "",
        "Of the CLINC splits' held-out queries, many belong to an intent that shares a name word "
        'with a listed one ("credit limit change" held out while "credit limit" is listed, '
        '"gas type" while "gas" is), which a profile of intent names alone can hardly rule '
        "out. A diagnostic, not a target: the same figures without those queries.",
        "",
        *_near_table([s for s in kinds["unsupported"] if s.near_listed is not None], models),
        "",
        "#### Written profiles' queries against the system prompt alone (`name` + `system_prompt`)",
        "",
        *_table(kinds["system_prompt"], figures),
        "",
        "#### CLINC profiles with their own field removed from the capability bank",
        "",
        "The capability bank was written by us knowing CLINC's domain and intent names (dev rows "
        "carry them), so the figures above are optimistic for fields the bank covers. Here the "
        "scored profile's field is removed from the bank. In scope vs out: "
        f"{_summary(held_scope)}; unsupported vs supported: {_summary(held_unsupported)}.",
        "",
        *_table([s for s in sets if s.name in held], held),
    ]
    model = ood_scope.fit_sets(sets)
    x = np.vstack([s.features for s in kinds["scope"]])
    y = np.concatenate([s.labels for s in kinds["scope"]])
    in_sample = float(((predict(model, x) >= 0.5) == y).mean())
    lines += [
        "",
        f"In-sample (the shipped model, fitted on all these rows): accuracy {in_sample:.3f}.",
    ]
    return model, "\n".join(lines)


def refusal_section(data: Path) -> tuple[dict[str, object], str]:
    loaded = ood_refusal.load(data)
    scope_fit = ood_refusal.scope_replies("fit")
    oof = ood_refusal.out_of_fold(loaded, scope_fit)
    model, probe = ood_refusal.train(ood_refusal.joined(loaded, scope_fit))
    check = ood_refusal.check_section(model, probe, ood_refusal.scope_replies("check"))
    text = ood_refusal.section(loaded, oof, TARGETS) + "\n\n" + check
    return {**model, "probe": probe.to_dict()}, text


def speed_section(data: Path, rows: int = 40) -> str:
    """Offline throughput: probe selection plus judging, with a SUT that answers instantly."""
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
    # Load the encoder, and build the profile's index and probe pools (once per profile).
    score_rows_sync(dataset[:2], config, sut=bot)
    start = time.perf_counter()
    score_rows_sync(dataset, config, sut=bot)
    seconds = time.perf_counter() - start
    return (
        f"{len(dataset)} rows × (1 + 3 probes), instant SUT, embedded judge: "
        f"{len(dataset) / seconds:.1f} rows/s ({seconds:.1f} s) once the profile's index and "
        "probe pools are built (a first row of a profile takes a few seconds more), on this "
        "shared 2-core machine."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="print, write nothing")
    args = parser.parse_args()
    data = common.data_dir()
    needed = ("xstest", "clinc150_ood", "offtopiceval_profiles")
    if not all((data / name).is_dir() for name in needed):
        print(f"skipped: {', '.join(needed)} not all found under {data} (set ASSAY_DATA_DIR)")
        sys.exit(0)
    if not args.dry_run:
        write_bank_vectors()
    scope_model, scope_text = scope_section(data)
    refusal_model, refusal_text = refusal_section(data)
    probe = refusal_model.pop("probe")
    calibration = {
        "encoder": "all-MiniLM-L6-v2-int8",
        "scope": {"features": list(SCOPE_FEATURES), **scope_model},
        "refusal": {"features": list(REFUSAL_FEATURES), **refusal_model},
        "refusal_probe": probe,
    }
    if not args.dry_run:
        OUTPUT.write_text(json.dumps(calibration, indent=1) + "\n")
        from assay.metrics.ood import calibration as shipped

        shipped._bundled.cache_clear()
        shipped.load_model.cache_clear()
        shipped.load_probe.cache_clear()
    speed = speed_section(data) if not args.dry_run else "(not measured in a dry run)"
    targets = "\n".join(f"| {target} | {value} |" for target, value in TARGETS.items())
    body = (
        f"| target | measured |\n|---|---|\n{targets}\n\n"
        f"### Scope\n\n{scope_text}\n\n### Refusal and 4-way outcome\n\n{refusal_text}\n\n"
        f"### Speed\n\n{speed}\n"
    )
    print(body)
    if not args.dry_run:
        common.write_section(
            TITLE,
            body
            + "\nRerun: `python bench/ood.py` (rewrites calibration.json and the bank vectors).",
        )
        print(f"wrote {OUTPUT} and {common.RESULTS}")


if __name__ == "__main__":
    main()
