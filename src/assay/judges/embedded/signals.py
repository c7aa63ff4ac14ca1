"""Evidence for each instruction, computed from sentence embeddings and plain-text cues.

`Evidence` holds one item's texts and their embeddings; `relevance_features` and
`completeness_features` turn it into named numbers. Which numbers feed which instruction is
`CHECK_FEATURES`; the calibrated mapping from those numbers to a probability is fitted by
`bench/calibrate.py` and lives in `calibration.json`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from assay.judges.embedded import text as T
from assay.judges.embedded.encoder import Matrix

#: A context statement counts as covered when some response sentence is at least this similar.
COVERED = 0.6
#: A response sentence counts as supported when some context statement is at least this similar.
SUPPORTED = 0.45
#: Two sentences this similar say the same thing; a negation on one side only is a conflict.
ALIGNED = 0.7
#: Context statements considered per item (long contexts keep their first statements).
MAX_CONTEXT_STATEMENTS = 80
#: Response sentences considered per item.
MAX_RESPONSE_SENTENCES = 60

#: The evidence behind each instruction. The sign says which way a feature may push the
#: probability (`+`: more of it means more likely followed); the calibration fit keeps to it, so
#: no check can learn a backwards rule from a quirk of the dev data.
CHECK_FEATURES: dict[str, tuple[str, ...]] = {
    # output_relevance
    "core_intent": ("+q_resp", "+q_sent_max", "+q_word_cover"),
    "prioritize_relevant": ("+q_sent_mean", "+q_sent_first", "-q_offtopic_share"),
    "no_tangents": (
        "+q_sent_min",
        "-q_offtopic_share",
        "+centroid_min",
        "-first_person_share",
        "-n_sentences_log",
    ),
    "no_misinterpretation": ("+q_resp", "+q_word_cover", "+q_sent_mean"),
    # completeness
    "query_aspects": ("+aspect_cover_min", "+aspect_cover_mean", "+q_resp", "+ctx_cover_mean"),
    "key_information": ("+ctx_cover_mean", "+ctx_cover_share", "+ctx_cover_min"),
    "no_omissions": ("+ctx_cover_weighted", "+ctx_cover_share", "+len_ratio", "+words_log"),
    "faithful_interpretation": (
        "+resp_support_mean",
        "+resp_support_min",
        "-unsupported_share",
        "-numbers_unsupported",
    ),
    "clear_structure": ("+adjacent_coherence", "-redundancy", "-mean_sentence_words"),
    "explains_when_needed": ("+explanation_rate", "+words_log", "+n_sentences_log"),
    "no_contradiction": (
        "-numbers_unsupported",
        "-negation_conflicts",
        "-self_conflicts",
        "+resp_support_min",
    ),
    "accurate_and_focused": (
        "+ctx_cover_mean",
        "+ctx_cover_share",
        "+resp_support_mean",
        "-unsupported_share",
    ),
}


def feature_names(check: str) -> tuple[str, ...]:
    return tuple(spec[1:] for spec in CHECK_FEATURES[check])


def feature_signs(check: str) -> tuple[int, ...]:
    return tuple(1 if spec[0] == "+" else -1 for spec in CHECK_FEATURES[check])


@dataclass
class Evidence:
    """One item's texts, split and embedded, plus the features computed so far."""

    response: str
    query: str | None
    context: tuple[str, ...]
    sentences: list[str] = field(init=False)
    statements: list[str] = field(init=False)
    aspects: list[str] = field(init=False)
    vectors: dict[str, Matrix] = field(default_factory=dict)
    features: dict[str, float] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.sentences = T.split_sentences(self.response)[:MAX_RESPONSE_SENTENCES]
        statements = [s for doc in self.context for s in T.split_sentences(doc)]
        self.statements = statements[:MAX_CONTEXT_STATEMENTS]
        self.aspects = _query_aspects(self.query) if self.query else []

    def texts(self) -> list[str]:
        """Every text this item needs embedded (duplicates are fine; the judge dedups).

        Whole texts are not encoded: the response's and context's vectors are the word-weighted
        means of their sentences, which halves encoder work and sees past the 256-token window.
        """
        wanted = [*self.sentences, *self.statements, *self.aspects]
        if self.query:
            wanted.append(self.query)
        return wanted

    def attach(self, lookup: Callable[[str], Matrix]) -> None:
        def stack(items: Sequence[str]) -> Matrix:
            return np.stack([lookup(t) for t in items]) if items else np.zeros((0, 384), np.float32)

        sentences, statements = stack(self.sentences), stack(self.statements)
        self.vectors = {
            "response": _mean_vector(sentences, self.sentences),
            "sentences": sentences,
            "statements": statements,
            "aspects": stack(self.aspects),
            "query": stack([self.query] if self.query else []),
            "context": _mean_vector(statements, self.statements),
        }


def _mean_vector(vectors: Matrix, texts: Sequence[str]) -> Matrix:
    """The unit-length, word-count-weighted mean of `vectors`, as a 1-row matrix."""
    if not texts:
        return np.zeros((0, 384), np.float32)
    weights = np.array([max(T.word_count(t), 1) for t in texts], dtype=np.float32)
    mean = (vectors * weights[:, None]).sum(axis=0)
    unit: Matrix = (mean / max(float(np.linalg.norm(mean)), 1e-12))[None, :].astype(np.float32)
    return unit


def _query_aspects(query: str) -> list[str]:
    """The separate things a query asks: its sentences, and `and`-joined questions split apart."""
    parts = [p for p in T.split_sentences(query) if T.content_words(p)]
    return parts or [query]


def shared_features(ev: Evidence) -> None:
    """Features both detectors use: length and the response's own topical spread."""
    centroid = ev.vectors["sentences"] @ ev.vectors["response"][0]
    first_person = [T.first_person(s) for s in ev.sentences]
    ev.features.update(
        n_sentences_log=math.log(len(ev.sentences)),
        words_log=math.log(max(T.word_count(ev.response), 1)),
        centroid_min=float(centroid.min()),
        first_person_share=sum(first_person) / len(first_person),
    )


def relevance_features(ev: Evidence) -> None:
    """Query↔response alignment: whole response, each sentence, and the query's key terms."""
    v = ev.vectors
    query = v["query"][0]
    # A sentence may answer one part of a multi-part query better than the query as a whole.
    sims = np.maximum(v["sentences"] @ query, (v["sentences"] @ v["aspects"].T).max(axis=1))
    top = float(sims.max())
    offtopic = sims < max(0.15, 0.45 * top)
    query_words = T.content_words(ev.query or "")
    response_words = T.content_words(ev.response)
    covered = {w for w in query_words if any(r.startswith(w[:5]) for r in response_words)}
    ev.features.update(
        q_resp=float(v["response"][0] @ query),
        q_sent_mean=float(sims.mean()),
        q_sent_min=float(sims.min()),
        q_sent_max=top,
        q_sent_first=float(sims[0]),
        q_offtopic_share=float(offtopic.mean()),
        q_word_cover=len(covered) / len(query_words) if query_words else 1.0,
    )
    best = int(sims.argmax())
    worst = int(sims.argmin())
    ev.notes.update(
        best_sentence=ev.sentences[best],
        worst_sentence=ev.sentences[worst],
        offtopic_sentences="\u241e".join(
            s for s, off in zip(ev.sentences, offtopic, strict=True) if off
        ),
        missing_query_terms=", ".join(sorted(query_words - covered)[:4]),
        query_terms=str(len(query_words)),
        covered_query_terms=str(len(covered)),
    )


def completeness_features(ev: Evidence) -> None:
    """Coverage of context statements, support of response sentences, conflicts, structure."""
    v = ev.vectors
    sentences, statements = v["sentences"], v["statements"]
    pair = statements @ sentences.T  # statements × sentences
    coverage = pair.max(axis=1)
    support = pair.max(axis=0)
    if ev.query:
        relevance = statements @ v["query"][0]
        weights = np.exp(relevance * 10.0)
        weighted = float((coverage * weights).sum() / weights.sum())
        aspect_cover = (v["aspects"] @ sentences.T).max(axis=1)
        q_resp = float(v["response"][0] @ v["query"][0])
    else:
        weighted = float(coverage.mean())
        aspect_cover = coverage
        q_resp = float(v["response"][0] @ v["context"][0])
    response_numbers = T.numbers(ev.response)
    context_numbers = T.numbers(" ".join(ev.context))
    unsupported_numbers = response_numbers - context_numbers
    negation_conflicts = [
        (ev.statements[i], ev.sentences[j])
        for i, j in zip(*np.nonzero(pair >= ALIGNED), strict=True)
        if T.has_negation(ev.statements[i]) != T.has_negation(ev.sentences[j])
    ]
    self_sims = sentences @ sentences.T
    n = len(ev.sentences)
    upper = [(i, j) for i in range(n) for j in range(i + 1, n)]
    self_conflicts = [
        (i, j)
        for i, j in upper
        if self_sims[i, j] >= ALIGNED
        and T.has_negation(ev.sentences[i]) != T.has_negation(ev.sentences[j])
    ]
    adjacent = [float(self_sims[i, i + 1]) for i in range(n - 1)]
    words = T.word_count(ev.response)
    context_words = max(T.word_count(" ".join(ev.context)), 1)
    ev.features.update(
        ctx_cover_mean=float(coverage.mean()),
        ctx_cover_min=float(coverage.min()),
        ctx_cover_share=float((coverage >= COVERED).mean()),
        ctx_cover_weighted=weighted,
        resp_support_mean=float(support.mean()),
        resp_support_min=float(support.min()),
        unsupported_share=float((support < SUPPORTED).mean()),
        aspect_cover_min=float(aspect_cover.min()),
        aspect_cover_mean=float(aspect_cover.mean()),
        q_resp=q_resp,
        len_ratio=math.log(max(words, 1) / context_words),
        numbers_unsupported=len(unsupported_numbers) / max(len(response_numbers), 1),
        negation_conflicts=min(len(negation_conflicts), 3) / 3.0,
        self_conflicts=min(len(self_conflicts), 3) / 3.0,
        mean_sentence_words=words / n,
        adjacent_coherence=float(np.mean(adjacent)) if adjacent else 1.0,
        redundancy=max((float(self_sims[i, j]) for i, j in upper), default=0.0),
        explanation_rate=T.explanation_markers(ev.response) / n,
    )
    missing = [ev.statements[i] for i in np.argsort(coverage) if coverage[i] < COVERED]
    unsupported = [ev.sentences[j] for j in np.argsort(support) if support[j] < SUPPORTED]
    ev.notes.update(
        covered=str(int((coverage >= COVERED).sum())),
        statements=str(len(ev.statements)),
        missing_statements="\u241e".join(missing[:3]),
        unsupported_sentences="\u241e".join(unsupported[:3]),
        weakest_aspect=ev.aspects[int(aspect_cover.argmin())] if ev.aspects else "",
        unsupported_numbers=", ".join(sorted(unsupported_numbers)[:4]),
        negation_conflict=" / ".join(negation_conflicts[0]) if negation_conflicts else "",
        self_conflict=" / ".join(ev.sentences[k] for k in self_conflicts[0])
        if self_conflicts
        else "",
    )
