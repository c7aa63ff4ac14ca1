"""Choose out-of-domain probes from the bundled banks for one profile (the offline generator).

Two kinds of probe, each made to be out of scope:

- near-domain: requests for a capability of the profile's own field that the profile does not
  list (from the capability bank: a card-and-balance assistant asked about a mortgage), and for
  the capabilities its disallowed topics claim (a bank assistant that declines investment advice
  asked "Should I put my savings into stocks or bonds?"). Rows take turns at which of the two
  comes first. A field the profile lists only a small share of its capabilities from
  (`MAIN_FIELD_SHARE`) was put in play by a stray match (a card service's "application status"
  matches the admissions office's): its capabilities are used only when the main fields and the
  disallowed topics give too few. When the profile's field is not in the capability bank, the
  everyday questions nearest the profile stand in;
- far-domain: everyday questions from the probe bank, spread from near to far, one per topic.

A candidate is used only when the scope judge puts it clearly out of scope
(P(in scope) < `PROBE_MAX_IN_SCOPE`, well below the 0.5 threshold, so that no probe sits where
the model is unsure), and an everyday topic is left out entirely once a fifth of its questions
look in scope (`TOPIC_OVERLAP`). No two probes share a capability or a topic.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from itertools import zip_longest

import numpy as np

from assay.judges.embedded.embedding_cache import shared_encoder
from assay.metrics.ood.bank import bank_vectors, probe_bank
from assay.metrics.ood.capabilities import CapabilityTable, capability_table
from assay.metrics.ood.probe_types import (
    DISALLOWED_TOPIC,
    GeneratedProbe,
    ProbeKind,
    ProbeRequest,
    ProbeSet,
)
from assay.metrics.ood.profile import UseCaseProfile
from assay.metrics.ood.scope import ScopeIndex, scope_index, scope_probabilities

#: Share of each row's probes that are near-domain.
NEAR_SHARE = 1 / 3
#: Share of a topic's questions judged in scope at which the whole topic is left out.
TOPIC_OVERLAP = 0.2
#: Highest P(in scope) a probe may have.
PROBE_MAX_IN_SCOPE = 0.25
#: How many of the closest unlisted capabilities take turns at leading a row's near probes.
NEAR_SPREAD = 3
#: Least share of the capabilities a profile lists that a field must hold to be one of its own,
#: unless it is related to one that does (its centroid at least `RELATED_FIELD` similar).
MAIN_FIELD_SHARE = 0.25
RELATED_FIELD = 0.4


@dataclass(frozen=True)
class _Candidate:
    text: str
    group: str  # capability or bank topic: one probe per group
    closeness: float  # to the profile (and the row's question)
    in_scope: float
    stray: bool  # of a field that only a stray match put in play


def seed_for(key: str) -> int:
    """A stable seed from a string (the row's input_id), the same in every process."""
    return int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:8], "big")


@dataclass(frozen=True)
class _Pool:
    """A profile's candidates before the row's question is known: texts, groups, embeddings,
    closeness to the profile and P(in scope). Computed once per profile."""

    texts: tuple[str, ...]
    groups: tuple[str, ...]
    vectors: np.ndarray
    closeness: np.ndarray
    in_scope: tuple[float, ...]
    stray: tuple[bool, ...]


def _pool(
    index: ScopeIndex,
    texts: list[str],
    groups: list[str],
    vectors: np.ndarray,
    stray: list[bool] | None = None,
) -> _Pool:
    if not texts:
        return _Pool((), (), vectors, np.zeros(0), (), ())
    features = index.features(texts, vectors)
    closeness = np.array([f["listed_max"] for f in features])
    in_scope = tuple(scope_probabilities(features))
    return _Pool(
        tuple(texts),
        tuple(groups),
        vectors,
        closeness,
        in_scope,
        tuple(stray or [False] * len(texts)),
    )


def _main_fields(index: ScopeIndex, table: CapabilityTable) -> set[str]:
    """The fields of the profile's own: those holding at least `MAIN_FIELD_SHARE` of the
    capabilities it lists, the other fields it lists from that are related to one of those
    (lodging to flights; not admissions to credit cards), and those its disallowed topics name."""
    listed = Counter(table.capabilities[i].domain for i in index.claimed)
    total = sum(listed.values())
    main = {field for field, count in listed.items() if count >= MAIN_FIELD_SHARE * total}
    centroid = table.field_centroids
    related = {
        field
        for field in listed
        if any(float(centroid[field] @ centroid[other]) >= RELATED_FIELD for other in main)
    }
    return main | related | {table.capabilities[i].domain for i in index.disallowed_capabilities}


@lru_cache(maxsize=32)
def _pools(fields: tuple[tuple[str, str], ...]) -> tuple[_Pool, _Pool]:
    """(near-domain, far-domain) candidate pools of the profile with these fields."""
    encoder = shared_encoder()
    index = scope_index(UseCaseProfile(dict(fields)), encoder)
    table = capability_table(encoder)
    main = _main_fields(index, table)
    near_texts, near_groups, near_stray = [], [], []
    for prefix, indices in (
        ("", index.unlisted_capabilities),
        (DISALLOWED_TOPIC, index.disallowed_capabilities),
    ):
        for i in indices:
            capability = table.capabilities[i]
            for text in capability.requests:
                near_texts.append(text)
                near_groups.append(f"{prefix}{capability.domain}: {capability.name}")
                near_stray.append(capability.domain not in main)
    # Bank requests: their rows of the capability table, not encoded again.
    near_vectors = table.vectors(near_texts, encoder)
    bank = probe_bank()
    near = _pool(index, near_texts, near_groups, near_vectors, near_stray)
    far = _pool(index, [p.text for p in bank], [p.topic for p in bank], bank_vectors(encoder))
    return near, far


def _candidates(request: ProbeRequest) -> tuple[list[_Candidate], list[_Candidate]]:
    """(near-domain, far-domain) candidates, clearly out of scope, closest first."""
    pools = _pools(tuple(sorted(request.profile.fields.items())))
    anchor = shared_encoder().encode([request.anchor])[0] if request.anchor else None
    near, far = (
        [
            _Candidate(t, g, float(c), p, s)
            for t, g, c, p, s in zip(
                pool.texts,
                pool.groups,
                pool.closeness if anchor is None else (pool.closeness + pool.vectors @ anchor) / 2,
                pool.in_scope,
                pool.stray,
                strict=True,
            )
        ]
        for pool in pools
    )
    # An everyday topic that overlaps the use case is left out whole: its other questions are
    # likely in scope too, only phrased differently.
    overlap: dict[str, list[bool]] = {}
    for candidate in far:
        overlap.setdefault(candidate.group, []).append(candidate.in_scope >= 0.5)
    far = [c for c in far if sum(overlap[c.group]) / len(overlap[c.group]) < TOPIC_OVERLAP]
    return _best_per_group(near), _best_per_group(far)


def _best_per_group(candidates: list[_Candidate]) -> list[_Candidate]:
    """Clearly-out-of-scope candidates grouped: each group's members closest first, groups
    ordered by their closest member."""
    groups: dict[str, list[_Candidate]] = {}
    for candidate in candidates:
        if candidate.in_scope < PROBE_MAX_IN_SCOPE:
            groups.setdefault(candidate.group, []).append(candidate)
    ordered = []
    for members in sorted(groups.values(), key=lambda m: -max(c.closeness for c in m)):
        ordered.extend(sorted(members, key=lambda c: -c.closeness))
    return ordered


def _alternate(groups: dict[str, list[_Candidate]], turn: int) -> dict[str, list[_Candidate]]:
    """The near groups with those of unlisted and of disallowed capabilities taken in turn;
    `turn` (the row's) says which comes first, so that rows asking one near-domain probe cover
    both. Unlisted groups come closest first (the likeliest to be mistaken for the field), the
    closest `NEAR_SPREAD` taking turns at leading; disallowed ones, which the profile itself
    rules out, start at a place `turn` picks, so that rows cover each of them."""
    disallowed = [name for name in groups if name.startswith(DISALLOWED_TOPIC)]
    unlisted = [name for name in groups if not name.startswith(DISALLOWED_TOPIC)]
    # The closest few unlisted groups take turns at leading: one close capability otherwise
    # led every row (a bank's tax-form question in 16 of 30 rows).
    lead = min(NEAR_SPREAD, len(unlisted))
    if lead:
        start = (turn // 2) % lead
        unlisted = unlisted[start:lead] + unlisted[:start] + unlisted[lead:]
    if disallowed:
        start = (turn // 2) % len(disallowed)
        disallowed = disallowed[start:] + disallowed[:start]
    first, second = (unlisted, disallowed) if turn % 2 == 0 else (disallowed, unlisted)
    order = [name for pair in zip_longest(first, second) for name in pair if name]
    return {name: groups[name] for name in order}


def _main_first(groups: dict[str, list[_Candidate]], wanted: int) -> dict[str, list[_Candidate]]:
    """The near groups of the profile's own fields and disallowed topics, in their order; those
    of a field a stray match put in play follow, only as many as the others fall short of
    `wanted`."""
    main = {name: members for name, members in groups.items() if not members[0].stray}
    stray = [name for name, members in groups.items() if members[0].stray]
    return {**main, **{name: groups[name] for name in stray[: max(0, wanted - len(main))]}}


def _groups(candidates: list[_Candidate]) -> dict[str, list[_Candidate]]:
    grouped: dict[str, list[_Candidate]] = {}
    for candidate in candidates:
        grouped.setdefault(candidate.group, []).append(candidate)
    return grouped


def choose_probes(request: ProbeRequest) -> ProbeSet:
    """Probes for `request` from the banks (see the module doc); deterministic at temperature 0."""
    near, far = _candidates(request)
    turn = seed_for(request.anchor) if request.anchor else 0
    near_groups, far_groups = _alternate(_groups(near), turn), _groups(far)
    if not near_groups:
        # The profile's field is not in the capability bank: the everyday topics closest to
        # the profile are the nearest probes there are.
        near_groups = dict(list(far_groups.items())[: max(1, len(far_groups) // 8)])
        far_groups = {k: v for k, v in far_groups.items() if k not in near_groups}
    available = len(near_groups) + len(far_groups)
    count = min(request.count, available)
    near_count = min(len(near_groups), max(1, round(count * NEAR_SHARE)) if count > 1 else 0)
    far_count = min(len(far_groups), count - near_count)
    near_count = count - far_count
    near_groups = _main_first(near_groups, near_count)
    rng = random.Random(request.seed)
    chosen: list[tuple[_Candidate, ProbeKind]] = []
    plan: list[tuple[ProbeKind, dict[str, list[_Candidate]], int]] = [
        ("near_domain", near_groups, near_count),
        ("far_domain", far_groups, far_count),
    ]
    for kind, groups, wanted in plan:
        names = list(groups)
        if request.temperature == 0:
            picks = _spread(names, wanted, turn) if kind == "far_domain" else names[:wanted]
            for name in picks:
                members = groups[name]
                # Near: the closest request; far: the row's question picks one of the topic's.
                pick = members[turn % len(members)] if kind == "far_domain" else members[0]
                chosen.append((pick, kind))
        else:
            pool = list(names)
            for _ in range(wanted):
                # Near picks favour close groups; the temperature flattens that preference.
                weights = [
                    math.exp(groups[n][0].closeness / (0.1 * request.temperature))
                    if kind == "near_domain"
                    else 1.0
                    for n in pool
                ]
                name = rng.choices(pool, weights=weights, k=1)[0]
                pool.remove(name)
                members = groups[name]
                chosen.append((members[0] if kind == "near_domain" else rng.choice(members), kind))
    probes = [GeneratedProbe(c.text, c.group, kind, round(c.in_scope, 4)) for c, kind in chosen]
    shortfall = None
    if count < request.count:
        shortfall = (
            f"the banks have only {available} capabilities and topics outside this use case "
            "(one probe per capability or topic)"
        )
    return ProbeSet(probes, shortfall)


def _spread(names: list[str], wanted: int, turn: int) -> list[str]:
    """`wanted` names evenly spaced over `names` (near to far); where the spacing starts follows
    `turn` (a hash of the row's question), so rows differ but each row's choice is fixed."""
    if not wanted:
        return []
    step = len(names) / wanted
    start = turn % max(int(step), 1)
    return [names[min(start + int(k * step), len(names) - 1)] for k in range(wanted)]
