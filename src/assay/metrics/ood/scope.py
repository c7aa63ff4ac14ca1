"""Offline scope judge: how likely a query is to be in scope for a use-case profile.

Features compare the query's embedding with the profile's reference texts (description, topics,
examples) and, as a contrast, with the probe bank of everyday off-topic questions. A logistic model
fitted by `bench/ood.py` (stored in `calibration.json`) turns them into P(in scope).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from assay.judges.embedded.encoder import Matrix
from assay.metrics.ood.bank import bank_vectors
from assay.metrics.ood.calibration import load_model
from assay.metrics.ood.embedding import CachedEncoder, shared_encoder
from assay.metrics.ood.profile import UseCaseProfile

SCOPE_FEATURES = ("topic_max", "topic_top3", "description", "bank_max", "margin")
#: Bank probes this similar to the query are taken to be the query itself and not used as contrast.
_SELF_MATCH = 0.995


def scope_features(
    queries: Sequence[str],
    profile: UseCaseProfile,
    encoder: CachedEncoder | None = None,
    query_vectors: Matrix | None = None,
) -> list[dict[str, float]]:
    """Named scope features for each query.

    queries: the user queries to place.
    profile: the use case they are measured against.
    encoder: embedding source (the shared MiniLM by default).
    query_vectors: the queries' embeddings when the caller already has them.
    """
    encoder = encoder or shared_encoder()
    if not queries:
        return []
    references = profile.reference_texts()
    described = profile.summary_texts()
    if query_vectors is None:
        query_vectors = encoder.encode(queries)
    reference_sims = query_vectors @ encoder.encode(references).T
    description_sims = query_vectors @ encoder.encode(described).T
    bank_sims = query_vectors @ bank_vectors(encoder).T
    bank_sims[bank_sims >= _SELF_MATCH] = -1.0
    rows = []
    for index in range(len(queries)):
        ranked = np.sort(reference_sims[index])[::-1]
        topic_max = float(ranked[0])
        bank_max = float(bank_sims[index].max())
        rows.append(
            {
                "topic_max": topic_max,
                "topic_top3": float(ranked[:3].mean()),
                "description": float(description_sims[index].max()),
                "bank_max": bank_max,
                "margin": topic_max - bank_max,
            }
        )
    return rows


def in_scope_probabilities(
    queries: Sequence[str], profile: UseCaseProfile, encoder: CachedEncoder | None = None
) -> list[float]:
    """Calibrated P(query is in scope for `profile`), one per query.

    queries: the user queries to judge.
    profile: the use case.
    encoder: embedding source (the shared MiniLM by default).
    """
    return scope_probabilities(scope_features(queries, profile, encoder))


def scope_probabilities(features: Sequence[dict[str, float]]) -> list[float]:
    """Calibrated P(in scope) from features computed by `scope_features`."""
    model = load_model("scope", SCOPE_FEATURES)
    return [model.probability(values) for values in features]
