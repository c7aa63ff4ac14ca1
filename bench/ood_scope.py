"""Scope judge of `llm.ood_detection`: the datasets it is fitted and measured on, and the
leave-one-profile-out evaluation (imported by `bench/ood.py`).

Datasets, each a profile with labelled queries:
- CLINC150 dev profiles `banking` and `travel` (`clinc150_ood/profiles.json`, their rows), and
  three more written here the same way (intent names of one CLINC domain) from the dev rows of
  `auto_and_commute`, `utility` and `work`: in scope = that domain's queries, out of scope =
  300 CLINC `oos` queries and 200 queries of other domains.
- In the domain but unsupported: for every CLINC profile, three splits that drop a third of its
  intents from the profile's list; the dropped intents' queries are out of scope.
- Twelve profiles we wrote from OffTopicEval system prompts (`bench/data/ood_profiles.yaml`):
  in-scope, same-field unsupported and off-domain queries; scored against the written profile
  and against the system prompt alone (`name` + `system_prompt` from ../shared/data).

A profile, its splits and its variants form one group: the model that scores a group is fitted
on the other groups only.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from sklearn.metrics import roc_auc_score

import common
from assay.judges.embedded.embedding_cache import shared_encoder
from assay.metrics.ood.capabilities import CapabilityTable, capability_table
from assay.metrics.ood.profile import UseCaseProfile, profile_from_mapping
from assay.metrics.ood.scope import SCOPE_FEATURES, build_index
from calibrate import fit, predict

#: Each scope feature's direction in the fit: all raise P(in scope) except what says the query
#: is closer to a disallowed topic than to what the profile lists.
SCOPE_SIGNS = tuple(
    -1 if name in ("disallowed_excess", "disallowed_word") else 1 for name in SCOPE_FEATURES
)
#: In-scope rows weigh this much more than out-of-scope rows in the fit. Chosen by watching the
#: leave-one-profile-out in-scope recall at 0.5 (weight 1 gave 0.88 on average): a probe is
#: only used when it is clearly out of scope, so the model should lean towards "in scope".
IN_SCOPE_WEIGHT = 2.0
PROFILES_FILE = common.ROOT / "bench" / "data" / "ood_profiles.yaml"
#: Extra CLINC profiles written from one domain's intent names: domain -> (name, sentence).
EXTRA_CLINC = {
    "auto_and_commute": ("Car and commute assistant", "A driving and commuting assistant"),
    "utility": ("Phone utility assistant", "A phone assistant for everyday utilities"),
    "work": ("Workplace assistant", "An assistant for employees at work"),
}
#: Capability-bank domains that cover each profile's field, dropped for the "field not in the
#: bank" variant of the figures.
FIELD_DOMAINS = {
    "banking": ("banking", "credit_cards"),
    "travel": ("flights", "lodging", "car_rental", "trip_planning"),
    "auto_and_commute": ("auto_and_commute",),
    "utility": ("utilities_assistant",),
    "work": ("workplace_hr",),
}
UNSUPPORTED_SEEDS = (0, 1, 2)


@dataclass
class ScopeSet:
    """One profile with labelled queries.

    kind: "scope" (in vs out of scope), "unsupported" (listed vs same-domain unlisted) or
        "system_prompt" (a written profile's queries against its system prompt alone).
    """

    name: str
    group: str
    kind: str
    profile: dict[str, str]
    queries: list[str]
    labels: np.ndarray
    features: np.ndarray = field(default_factory=lambda: np.zeros((0, len(SCOPE_FEATURES))))
    #: CLINC splits: which held-out queries' intent shares a name word with a listed intent
    #: ("credit limit change" held out, "credit limit" listed).
    near_listed: np.ndarray | None = None


def _clinc_profile(name: str, sentence: str, intents: list[str]) -> dict[str, str]:
    listed = "; ".join(intent.replace("_", " ") for intent in intents)
    return {
        "name": name,
        "description": f"{sentence}. It can help with: {listed}. Anything else is out of scope "
        "and should be politely declined.",
    }


def clinc_sets(data: Path) -> list[ScopeSet]:
    folder = data / "clinc150_ood"
    profiles = json.loads((folder / "profiles.json").read_text())
    sets: list[ScopeSet] = []
    by_query: dict[str, dict[str, Any]] = {}
    intents: dict[str, list[str]] = {}
    for name in profiles:
        rows = common.read_jsonl(folder / f"rows_{name}.jsonl")
        for row in rows:
            by_query.setdefault(row["query"], row)
        fields = {key: profiles[name][key] for key in ("name", "description")}
        labels = np.array([r["label"] == "in_domain" for r in rows])
        sets.append(ScopeSet(name, name, "scope", fields, [r["query"] for r in rows], labels))
        intents[name] = [i.strip() for i in profiles[name]["in_scope_intents"].split(",")]
    pool = list(by_query.values())
    for domain, (title, sentence) in EXTRA_CLINC.items():
        rng = random.Random(domain)
        inside = [r for r in pool if r["meta"]["clinc_domain"] == domain]
        oos = [r for r in pool if r["meta"]["clinc_domain"] is None]
        other = [r for r in pool if r["meta"]["clinc_domain"] not in (None, domain)]
        rng.shuffle(oos)
        rng.shuffle(other)
        rows = inside + oos[:300] + other[:200]
        intents[domain] = sorted({r["meta"]["clinc_intent"] for r in inside})
        labels = np.array([r["meta"]["clinc_domain"] == domain for r in rows])
        fields = _clinc_profile(title, sentence, intents[domain])
        sets.append(ScopeSet(domain, domain, "scope", fields, [r["query"] for r in rows], labels))
    for base in list(sets):
        sets.extend(_unsupported_splits(base, intents[base.name], by_query))
    return sets


def _unsupported_splits(
    base: ScopeSet, intents: list[str], by_query: dict[str, dict[str, Any]]
) -> list[ScopeSet]:
    """Profiles that list two thirds of `base`'s intents; the rest are in-domain unsupported."""
    sentence = base.profile["description"].split(". It can help with:")[0]
    inside = [q for q, label in zip(base.queries, base.labels, strict=True) if label]
    splits = []
    for seed in UNSUPPORTED_SEEDS:
        rng = random.Random(f"{base.name}-{seed}")
        dropped = set(rng.sample(intents, round(len(intents) / 3)))
        kept = [i for i in intents if i not in dropped]
        fields = _clinc_profile(base.profile["name"], sentence, kept)
        labels = np.array([by_query[q]["meta"]["clinc_intent"] not in dropped for q in inside])
        listed_words = {word for intent in kept for word in intent.split("_") if len(word) > 2}
        near = np.array(
            [
                not label
                and bool(set(by_query[q]["meta"]["clinc_intent"].split("_")) & listed_words)
                for q, label in zip(inside, labels, strict=True)
            ]
        )
        name = f"{base.name} (split {seed})"
        splits.append(
            ScopeSet(name, base.group, "unsupported", fields, inside, labels, near_listed=near)
        )
    return splits


def written_sets(data: Path) -> list[ScopeSet]:
    written = yaml.safe_load(PROFILES_FILE.read_text())["profiles"]
    prompts = {
        row["id"]: row["use_case"]
        for row in common.read_jsonl(data / "offtopiceval_profiles" / "profiles.jsonl")
    }
    sets = []
    for name, spec in written.items():
        queries = spec["queries"]
        inside, unsupported = queries["in_scope"], queries["unsupported"]
        every = inside + unsupported + queries["off_domain"]
        labels = np.array([True] * len(inside) + [False] * (len(every) - len(inside)))
        profile = spec["profile"]
        sets.append(ScopeSet(name, name, "scope", profile, every, labels))
        pair = inside + unsupported
        sets.append(
            ScopeSet(
                f"{name} (unsupported)", name, "unsupported", profile, pair, labels[: len(pair)]
            )
        )
        prompt = {key: prompts[spec["source"]][key] for key in ("name", "system_prompt")}
        sets.append(
            ScopeSet(f"{name} (system prompt)", name, "system_prompt", prompt, every, labels)
        )
    return sets


def featurize(sets: list[ScopeSet], table: CapabilityTable | None = None) -> None:
    """Fill each set's feature matrix (optionally with another capability bank)."""
    encoder = shared_encoder()
    for scope_set in sets:
        index = build_index(profile_from_mapping(scope_set.profile), encoder, table)
        rows = index.features(scope_set.queries, encoder.encode(scope_set.queries))
        scope_set.features = np.array([[row[n] for n in SCOPE_FEATURES] for row in rows])


def _weights(sets: list[ScopeSet]) -> np.ndarray:
    """Every set weighs the same in total; in-scope rows weigh IN_SCOPE_WEIGHT each."""
    parts = [np.where(s.labels, IN_SCOPE_WEIGHT, 1.0) / len(s.labels) for s in sets]
    weights = np.concatenate(parts)
    return weights * len(weights) / weights.sum()


def fit_sets(sets: list[ScopeSet]) -> dict[str, Any]:
    x = np.vstack([s.features for s in sets])
    y = np.concatenate([s.labels for s in sets]).astype(float)
    return fit(x, y, SCOPE_SIGNS, _weights(sets))


@dataclass(frozen=True)
class Figures:
    """One set's out-of-profile figures: AUROC, in-scope recall and false-positive rate at 0.5."""

    auroc: float
    recall: float
    false_positive: float


def figures_of(model: dict[str, Any], scope_set: ScopeSet) -> Figures:
    p = predict(model, scope_set.features)
    y = scope_set.labels
    return Figures(
        float(roc_auc_score(y, p)), float((p[y] >= 0.5).mean()), float((p[~y] >= 0.5).mean())
    )


def models_without(sets: list[ScopeSet]) -> dict[str, dict[str, Any]]:
    """Per group, the model fitted on the other groups."""
    return {
        group: fit_sets([s for s in sets if s.group != group])
        for group in dict.fromkeys(s.group for s in sets)
    }


def leave_one_profile_out(
    sets: list[ScopeSet], models: dict[str, dict[str, Any]] | None = None
) -> dict[str, Figures]:
    """Each set scored by a model fitted on the other groups (`models_without`)."""
    models = models or models_without(sets)
    return {s.name: figures_of(models[s.group], s) for s in sets}


def without_domains(domains: tuple[str, ...]) -> CapabilityTable:
    """The bundled capability bank without `domains` (for the "field not in the bank" figures)."""
    table = capability_table()
    keep = [i for i, c in enumerate(table.capabilities) if c.domain not in domains]
    rows = [r for r, owner in enumerate(table.request_owner) if owner in set(keep)]
    renumber = {old: new for new, old in enumerate(keep)}
    return CapabilityTable(
        tuple(table.capabilities[i] for i in keep),
        table.name_vectors[keep],
        table.request_vectors[rows],
        np.array([renumber[int(table.request_owner[r])] for r in rows], dtype=np.int64),
    )


def field_held_out(sets: list[ScopeSet]) -> dict[str, Figures]:
    """Leave-one-profile-out figures of the CLINC profiles with their own field removed from the
    capability bank (features of the scored group recomputed; the model is fitted as usual)."""
    figures = {}
    for group, domains in FIELD_DOMAINS.items():
        mine = [s for s in sets if s.group == group]
        saved = [s.features for s in mine]
        featurize(mine, without_domains(domains))
        model = fit_sets([s for s in sets if s.group != group])
        for scope_set in mine:
            figures[scope_set.name] = figures_of(model, scope_set)
        for scope_set, features in zip(mine, saved, strict=True):
            scope_set.features = features
    return figures


def profile_of(scope_set: ScopeSet) -> UseCaseProfile:
    return profile_from_mapping(scope_set.profile)
