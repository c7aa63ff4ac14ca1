"""The dev rows with their folds, and (good answer, damaged copy) pairs built from them.

Every row belongs to a question group (a haluquestqa question, a ragchecker instance), and every
group to one of five folds, by a hash of its id. A pair is in the fold of the row it was made
from, so a model fitted on folds other than k never saw a row, or a damaged copy of a row, of
fold k. The damaged text is drawn from other groups (unrelated or similar answers), which may sit
in any fold: they are material, not labels.

    from pairs import dev_set
    data = dev_set()  # cached in bench/.cache
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sys
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

import common
import damage
from assay.judges.embedded import encoder as encoder_module
from assay.judges.embedded import text as splitter
from assay.judges.embedded.encoder import load_encoder

FOLDS = 5
#: `ASSAY_BENCH_DAMAGE_SEED` draws other damage, to measure how far a figure moves by the
#: draw alone (DEVELOPERS.md, "Redraw noise").
SEED = int(os.environ.get("ASSAY_BENCH_DAMAGE_SEED", "16"))
#: Which damage kinds are made from which source, and for which detector.
PLAN: dict[str, dict[str, tuple[str, ...]]] = {
    "output_relevance": {
        "haluquestqa": ("tangent", "other_question", "unrelated_answer"),
        "ragchecker": ("tangent", "other_question", "unrelated_answer"),
    },
    "completeness": {
        "ragchecker": tuple(k.name for k in damage.KINDS),
        # haluquestqa has no documents: only damage that does not need them (question as context).
        "haluquestqa": (
            "aspect_omission",
            "structure",
            "explanation_stripped",
            "self_contradiction",
        ),
    },
}


#: Damage kinds also judged without a query (ragchecker rows with the query removed).
NO_QUERY_KINDS = (
    "tangent",
    "other_question",
    "context_omission",
    "context_contradiction",
    "unsupported_content",
)


@dataclass
class Row:
    """One (query, response, context) the judge scores."""

    id: str
    group: str
    fold: int
    source: str
    query: str | None
    response: str
    context: tuple[str, ...]
    topic: str = ""  # haluquestqa category or ragchecker dataset: where unrelated answers come from
    #: Human label where the data has one: no flagged span (haluquestqa), or the more complete
    #: answer of a non-tie ragchecker pair (1) and the less complete one (0).
    human: float | None = None
    #: For damage pairs: the kind, the rule, and whether this is the good or the damaged copy.
    kind: str = ""
    rule: str = ""
    damaged: bool = False
    pair: int = -1


def fold_of(group: str) -> int:
    return int(hashlib.sha256(group.encode()).hexdigest(), 16) % FOLDS


def _haluquestqa(detector: str) -> list[Row]:
    name = "relevance" if detector == "output_relevance" else "completeness"
    flag = "derived_has_irrelevant_span" if name == "relevance" else "derived_has_incomplete_span"
    rows = common.read_jsonl(common.require_data() / "haluquestqa" / f"{name}.jsonl")
    out = []
    for r in rows:
        group = "hq-" + r["id"].split("-")[1]
        context = () if detector == "output_relevance" else (r["query"],)
        out.append(
            Row(
                r["id"],
                group,
                fold_of(group),
                "haluquestqa",
                r["query"],
                r["response"],
                context,
                human=float(not r["meta"][flag]),
                topic=r["meta"]["category"],
            )
        )
    return out


#: ragchecker's three human judgements of a pair (each −2..2; > 0: response_b is better).
JUDGEMENTS = ("completeness", "correctness", "overall")
HumanPair = tuple[int, int, dict[str, float]]


def _ragchecker() -> tuple[list[Row], list[HumanPair]]:
    """Unique ragchecker responses, and the human pairs as (index a, index b, judgements)."""
    rows = common.read_jsonl(
        common.require_data() / "ragchecker_meta_eval" / "human_pairwise.jsonl"
    )
    unique: dict[tuple[str, str], int] = {}
    out: list[Row] = []
    pairs = []
    for r in rows:
        group = f"rc-{r['meta']['instance_id']}"
        index = []
        for text in (r["response"], r["response_b"]):
            key = (r["query"], text)
            if key not in unique and text.strip():
                unique[key] = len(out)
                out.append(
                    Row(
                        f"{group}-{len(out)}",
                        group,
                        fold_of(group),
                        "ragchecker",
                        r["query"],
                        text,
                        (r["context"],),
                        topic=r["meta"]["dataset"],
                    )
                )
            index.append(unique.get(key, -1))
        if min(index) >= 0:
            judged = {
                "completeness": float(r["label"]),
                "correctness": float(r["meta"]["correctness_label"]),
                "overall": float(r["meta"]["overall_label"]),
            }
            pairs.append((index[0], index[1], judged))
    return out, pairs


def _neighbours(rows: list[Row]) -> dict[str, list[str]]:
    """group -> answers to the most similar other questions (by query embedding), nearest first."""
    groups: dict[str, Row] = {}
    for row in rows:
        groups.setdefault(row.group, row)
    names = list(groups)
    vectors = load_encoder("minilm").encode([groups[g].query for g in names])
    sims = vectors @ vectors.T
    answers: dict[str, list[str]] = {}
    for row in rows:
        answers.setdefault(row.group, []).append(row.response)
    out = {}
    for i, g in enumerate(names):
        order = [names[j] for j in np.argsort(-sims[i]) if names[j] != g][:4]
        out[g] = [answers[o][0] for o in order]
    return out


def _make_pairs(base: list[Row], kinds: tuple[str, ...], detector: str, start: int) -> list[Row]:
    near = _neighbours(base)
    by_topic: dict[str, list[str]] = {}
    for row in base:
        by_topic.setdefault(row.topic, []).append(row.response)
    out: list[Row] = []
    pair = start
    for row in base:
        if detector == "output_relevance" and row.human == 0.0:
            continue  # a pair's good side must be an answer the experts found relevant
        unrelated = [
            a for topic, answers in by_topic.items() if topic != row.topic for a in answers
        ]
        # One generator per row: a change to one row's text (or the splitter's reading of it)
        # does not redraw every later row's damage, so two judges compare on the same pairs.
        rng = random.Random(f"{SEED}-{detector}-{row.id}")
        src = damage.Source(row.query, row.context, unrelated, near[row.group])
        good = damage.normalised(row.response)
        for name in kinds:
            made = damage.damage(damage.KIND_BY_NAME[name], good, src, rng)
            if made is None:
                continue
            rule, text = made
            common_fields = dict(
                group=row.group,
                fold=row.fold,
                source=row.source,
                query=row.query,
                context=row.context,
                topic=row.topic,
                kind=name,
                rule=rule,
                pair=pair,
            )
            out.append(Row(f"{row.id}-{name}-good", response=good, damaged=False, **common_fields))
            out.append(Row(f"{row.id}-{name}-bad", response=text, damaged=True, **common_fields))
            pair += 1
    return out


@dataclass
class DevSet:
    """Per detector: human-labelled rows, ragchecker human pairs, and damage pairs."""

    human: dict[str, list[Row]]
    human_pairs: list[HumanPair]  # indices into human["completeness"] (its ragchecker part)
    damage: dict[str, list[Row]]


def dev_set() -> DevSet:
    cache = common.CACHE / "devset.json"
    # The damage rules, the sentence splitter they cut answers with, the encoder that picks the
    # nearest other question, and this module.
    key = common.cache_key(damage, splitter, encoder_module, sys.modules[__name__])
    digest = hashlib.sha256(f"{SEED}{key}".encode()).hexdigest()[:16]
    if cache.exists():
        saved: dict[str, Any] = json.loads(cache.read_text())
        if saved["digest"] == digest:
            return _load(saved)
    rel = _haluquestqa("output_relevance")
    hq_comp = _haluquestqa("completeness")
    rc, rc_pairs = _ragchecker()
    # Completeness human rows: ragchecker pair members first (indices match rc_pairs), then
    # haluquestqa completeness (question as context).
    comp_human = rc + hq_comp
    damage_rows: dict[str, list[Row]] = {"output_relevance": [], "completeness": []}
    sources = {"haluquestqa": {"output_relevance": rel, "completeness": hq_comp}, "ragchecker": rc}
    for detector, plan in PLAN.items():
        for source, kinds in plan.items():
            base = sources[source]
            rows = base[detector] if isinstance(base, dict) else base
            start = len(damage_rows[detector]) // 2
            damage_rows[detector] += _make_pairs(rows, kinds, detector, start)
    # The same ragchecker pairs with no query (completeness takes the query as optional): the
    # judge must then read the query's aspects from the context.
    start = len(damage_rows["completeness"]) // 2
    for row in [r for r in damage_rows["completeness"] if r.source == "ragchecker"]:
        if row.kind in NO_QUERY_KINDS:
            damage_rows["completeness"].append(
                replace(
                    row,
                    id=row.id + "-noquery",
                    query=None,
                    source="ragchecker-noquery",
                    pair=start + row.pair,
                )
            )
    data = DevSet({"output_relevance": rel, "completeness": comp_human}, rc_pairs, damage_rows)
    common.CACHE.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps({"digest": digest, **_dump(data)}))
    return data


def _dump(data: DevSet) -> dict[str, Any]:
    return {
        "human": {d: [asdict(r) for r in rows] for d, rows in data.human.items()},
        "human_pairs": data.human_pairs,
        "damage": {d: [asdict(r) for r in rows] for d, rows in data.damage.items()},
    }


def _row(raw: dict[str, Any]) -> Row:
    return Row(**{**raw, "context": tuple(raw["context"])})


def _load(saved: dict[str, Any]) -> DevSet:
    return DevSet(
        {d: [_row(r) for r in rows] for d, rows in saved["human"].items()},
        [(int(a), int(b), dict(j)) for a, b, j in saved["human_pairs"]],
        {d: [_row(r) for r in rows] for d, rows in saved["damage"].items()},
    )


if __name__ == "__main__":
    data = dev_set()
    for detector, rows in data.damage.items():
        kinds: dict[str, int] = {}
        for r in rows:
            if r.damaged:
                kinds[f"{r.source}/{r.kind}"] = kinds.get(f"{r.source}/{r.kind}", 0) + 1
        print(detector, len(data.human[detector]), "human rows;", kinds)
    for judgement in JUDGEMENTS:
        n = sum(1 for p in data.human_pairs if p[2][judgement] != 0)
        print(n, f"ragchecker pairs not tied on {judgement}")
