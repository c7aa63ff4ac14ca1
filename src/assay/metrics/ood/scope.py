"""Offline scope judge: how likely a query is to be in scope for a use-case profile.

A profile is turned into four sets of reference texts (`ScopeIndex`), using the capability bank
(`capabilities.py`) and the everyday probe bank (`bank.py`):

- listed: the profile's topics (as written and as requests: "Can you help me with ...?") and
  examples, plus the requests of the bank capabilities they match ("claim"), so "translate"
  also stands for "How do you say ... in Italian?";
- unlisted: the other capabilities of the domains the profile claimed from: requests in the
  application's field that it does not list (a bank assistant that lists cards and balances,
  asked for a mortgage);
- disallowed: the profile's disallowed topics (also as requests) and the capabilities they claim;
- other: every remaining capability and the everyday questions of the probe bank, except those
  close to the listed texts.

A query's features compare its best match among the listed texts with its best match in the
unlisted and other sets, say how much closer it comes to a disallowed text than to any listed one
(0 when it does not, or when the profile disallows nothing), say whether it uses a word that only
the disallowed topics use ("Do my French homework" against "doing homework"), count how many of
its nearest references are listed, and read the profile's own linear separator of listed and
contrast texts (`separator.py`). A logistic model fitted
by `bench/ood.py` (stored in `calibration.json`) turns them into P(in scope). A text that is
(almost) the query itself is never used as its reference, so bank questions can be scored too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import numpy.typing as npt

from assay.judges.embedded.embedding_cache import CachedEncoder, shared_encoder
from assay.judges.embedded.encoder import Matrix
from assay.judges.embedded.text import word_roots
from assay.metrics.ood.bank import bank_vectors
from assay.metrics.ood.calibration import load_model
from assay.metrics.ood.capabilities import CapabilityTable, capability_table
from assay.metrics.ood.profile import UseCaseProfile
from assay.metrics.ood.separator import Separator

SCOPE_FEATURES = (
    "listed_max",
    "margin_unlisted",
    "margin_other",
    "disallowed_excess",
    "disallowed_word",
    "neighbour_share",
    "separator",
)
#: Least similarity between a profile topic (or example) and a capability for a claim.
CLAIM_MIN = 0.55
#: Capabilities within this much of a topic's best match are claimed with it (near-synonyms).
CLAIM_TIE = 0.02
#: For a profile with no topics or examples, its prose claims whole domains this similar to it.
DOMAIN_MIN = 0.5
#: Everyday-bank questions at least this similar to a listed text are not used as contrast.
BANK_OVERLAP = 0.6
#: How many nearest references `neighbour_share` looks at.
NEIGHBOURS = 10
#: References this similar to the query are the query itself and are skipped.
SELF_MATCH = 0.995
#: P(in scope) at or above which a query counts as in scope.
IN_SCOPE_THRESHOLD = 0.5
#: Topics are noun phrases ("pronunciation tips"), queries are requests: each topic is also
#: embedded in these request forms, which sit closer to how users ask (figures in bench/RESULTS.md).
REQUEST_FORMS = ("Can you help me with {}?", "I have a question about {}.")


def with_request_forms(topics: list[str]) -> list[str]:
    """The topic phrases, then each of them in every `REQUEST_FORMS` form."""
    return topics + [form.format(topic) for topic in topics for form in REQUEST_FORMS]


def _claims(
    table: CapabilityTable, vectors: Matrix
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.float64]]:
    """Which capabilities the texts with embeddings `vectors` claim, and each capability's best
    match to any of them (its name or any of its requests, whichever is closer)."""
    count = len(table.capabilities)
    if not len(vectors):
        return np.zeros(count, dtype=bool), np.zeros(count)
    by_request = np.full((len(vectors), count), -1.0)
    request_sims = vectors @ table.request_vectors.T
    np.maximum.at(by_request.T, table.request_owner, request_sims.T)
    match = np.maximum(vectors @ table.name_vectors.T, by_request)
    claimed = np.zeros(count, dtype=bool)
    for row in match:
        best = row.max()
        if best >= CLAIM_MIN:
            claimed |= row >= best - CLAIM_TIE
    return claimed, match.max(axis=0)


@dataclass(frozen=True)
class ScopeIndex:
    """A profile's reference sets, embedded (see the module doc).

    listed, unlisted, disallowed, other: embeddings of each set's texts.
    listed_texts: the listed texts, for explanations.
    claimed: indices of the capabilities the profile lists.
    unlisted_capabilities: indices of same-domain capabilities it does not list.
    disallowed_capabilities: indices of the capabilities its disallowed topics claim.
    domains: the capability-bank domains the profile claimed from.
    separator: the linear model of listed against all contrast texts.
    disallowed_words: word roots of the disallowed topics that neither the listed texts nor the
        profile's prose use.
    """

    listed: Matrix
    unlisted: Matrix
    disallowed: Matrix
    other: Matrix
    listed_texts: tuple[str, ...]
    claimed: tuple[int, ...]
    unlisted_capabilities: tuple[int, ...]
    disallowed_capabilities: tuple[int, ...]
    domains: frozenset[str]
    separator: Separator
    disallowed_words: frozenset[str]

    def features(self, queries: Sequence[str], query_vectors: Matrix) -> list[dict[str, float]]:
        """Named scope features for each query, given its embedding (rows of `query_vectors`)."""
        if len(queries) != len(query_vectors):
            raise ValueError(f"{len(queries)} queries but {len(query_vectors)} query vectors")
        sets = [self.listed, self.unlisted, self.disallowed, self.other]
        every = np.concatenate([query_vectors @ vectors.T for vectors in sets], axis=1)
        # The separator numbers its references in this order; a query that is one of them is
        # scored without it.
        mine = every >= SELF_MATCH
        itself = np.where(mine.any(axis=1), every.argmax(axis=1), -1)
        every[mine] = -1.0
        bounds = np.cumsum([0] + [len(vectors) for vectors in sets])
        sims = [every[:, start:end] for start, end in zip(bounds[:-1], bounds[1:], strict=True)]
        best = [s.max(axis=1) if s.shape[1] else np.zeros(len(query_vectors)) for s in sims]
        nearest = np.argsort(-every, axis=1)[:, :NEIGHBOURS]
        share = (nearest < sims[0].shape[1]).mean(axis=1)
        listed, unlisted, disallowed, other = best
        separated = self.separator.scores(query_vectors, itself)
        return [
            {
                "listed_max": float(listed[i]),
                "margin_unlisted": float(listed[i] - unlisted[i]),
                "margin_other": float(listed[i] - other[i]),
                # Not a margin like the two above: most profiles disallow nothing, and a
                # margin to an empty set would only repeat listed_max.
                "disallowed_excess": max(0.0, float(disallowed[i] - listed[i])),
                "disallowed_word": float(bool(word_roots(query) & self.disallowed_words)),
                "neighbour_share": float(share[i]),
                "separator": float(separated[i]),
            }
            for i, query in enumerate(queries)
        ]


def build_index(
    profile: UseCaseProfile, encoder: CachedEncoder, table: CapabilityTable | None = None
) -> ScopeIndex:
    """The reference sets of `profile`, embedded with `encoder` (use `scope_index`, which caches
    them per profile).

    table: the capability bank to use (the bundled one by default; the benchmark passes one
        with a domain removed, to measure a profile whose field the bank does not cover).
    """
    table = table or capability_table(encoder)
    own = with_request_forms(profile.topics()) + profile.examples()
    disallowed_topics = profile.disallowed()
    banned = with_request_forms(disallowed_topics)
    prose = profile.summary_texts()
    claimed, claim_match = _claims(table, table.vectors(own, encoder))
    if not own:
        # No list to hold the profile to: its prose stands for the scope, and whole domains
        # that the prose describes count as listed.
        own = prose
        described = table.vectors(prose, encoder)
        domain_names = sorted({c.domain_name for c in table.capabilities})
        fit = (described @ table.vectors(domain_names, encoder).T).max(axis=0)
        matched = {name for name, sim in zip(domain_names, fit, strict=True) if sim >= DOMAIN_MIN}
        claimed = np.array([c.domain_name in matched for c in table.capabilities])
        claim_match = claimed.astype(float)
    forbidden, forbid_match = _claims(table, table.vectors(banned, encoder))
    # A capability both listed and disallowed goes to whichever it matches better.
    both = claimed & forbidden
    claimed &= ~(both & (forbid_match > claim_match))
    forbidden &= ~(both & claimed)
    domains = frozenset(table.capabilities[i].domain for i in np.flatnonzero(claimed | forbidden))
    in_play = np.array([c.domain in domains for c in table.capabilities])
    free = ~claimed & ~forbidden

    def texts(mask: npt.NDArray[np.bool_]) -> list[str]:
        return [text for i in np.flatnonzero(mask) for text in table.texts_of(int(i))]

    listed_texts = list(dict.fromkeys(own + texts(claimed)))
    listed = table.vectors(listed_texts, encoder)
    everyday = bank_vectors(encoder)
    closeness = (everyday @ listed.T).max(axis=1) if len(listed) else np.zeros(len(everyday))
    other = np.vstack(
        [table.vectors(texts(free & ~in_play), encoder), everyday[closeness < BANK_OVERLAP]]
    )
    unlisted = table.vectors(texts(free & in_play), encoder)
    disallowed = table.vectors(banned + texts(forbidden), encoder)
    # Words the profile uses for what it does (its prose too) are not disallowed-only.
    listed_words = frozenset().union(*map(word_roots, listed_texts + prose))
    disallowed_words = frozenset().union(*map(word_roots, disallowed_topics)) - listed_words
    return ScopeIndex(
        listed=listed,
        unlisted=unlisted,
        disallowed=disallowed,
        other=other,
        listed_texts=tuple(listed_texts),
        claimed=tuple(int(i) for i in np.flatnonzero(claimed)),
        unlisted_capabilities=tuple(int(i) for i in np.flatnonzero(free & in_play)),
        disallowed_capabilities=tuple(int(i) for i in np.flatnonzero(forbidden)),
        domains=domains,
        separator=Separator.fit(listed, np.vstack([unlisted, disallowed, other])),
        disallowed_words=disallowed_words,
    )


@lru_cache(maxsize=64)
def _cached_index(fields: tuple[tuple[str, str], ...], encoder: CachedEncoder) -> ScopeIndex:
    return build_index(UseCaseProfile(dict(fields)), encoder)


def scope_index(profile: UseCaseProfile, encoder: CachedEncoder | None = None) -> ScopeIndex:
    """The (cached) reference sets of `profile`; see `build_index`."""
    return _cached_index(tuple(sorted(profile.fields.items())), encoder or shared_encoder())


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
    if query_vectors is None:
        query_vectors = encoder.encode(list(queries))
    return scope_index(profile, encoder).features(queries, query_vectors)


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
