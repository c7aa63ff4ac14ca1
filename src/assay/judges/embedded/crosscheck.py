"""Which sentence pairs the agreement model reads, and the features taken from its answers.

Reading every (statement, sentence) pair would cost too much, so each response sentence is
paired with its most similar context statements, each context statement with its most similar
response sentences, and response sentences with each other where they are close enough to
restate one another.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from assay.judges.embedded.agreement import may_conflict
from assay.judges.embedded.encoder import Matrix

#: Most similar partners read per sentence (and per context statement).
PARTNERS = 1
#: Context pairs less similar than this are not read (they state different things).
CONTEXT_CANDIDATE = 0.35
#: Response sentences at least this similar are read as a pair (possible self-contradiction).
SELF_CANDIDATE = 0.6
#: Self pairs read per response, the most similar first.
SELF_PAIRS = 4

Pair = tuple[str, str]
Probabilities = npt.NDArray[np.float32]  # supported, contradicted, neither


def context_pairs(statements: Sequence[str], sentences: Sequence[str], sims: Matrix) -> list[Pair]:
    """(statement, sentence) pairs to read. sims: statements × sentences."""
    chosen: set[tuple[int, int]] = set()
    for j in range(len(sentences)):
        for i in np.argsort(-sims[:, j])[:PARTNERS]:
            if sims[i, j] >= CONTEXT_CANDIDATE:
                chosen.add((int(i), j))
    for i in range(len(statements)):
        for j in np.argsort(-sims[i])[:PARTNERS]:
            if sims[i, j] >= CONTEXT_CANDIDATE:
                chosen.add((i, int(j)))
    return [(statements[i], sentences[j]) for i, j in sorted(chosen)]


def self_pairs(sentences: Sequence[str], sims: Matrix) -> list[Pair]:
    """(earlier, later) response sentence pairs to read. sims: sentences × sentences.

    Of the SELF_PAIRS closest pairs, only those that `may_conflict` are read: a self pair is read
    for its contradiction alone, which `features` sets to 0 for any other pair, so skipping them
    saves the model's time without changing a result.
    """
    n = len(sentences)
    close = [
        (float(sims[j, k]), j, k)
        for j in range(n)
        for k in range(j + 1, n)
        if sims[j, k] >= SELF_CANDIDATE and sentences[j] != sentences[k]
    ]
    closest = [(sentences[j], sentences[k]) for _, j, k in sorted(close, reverse=True)[:SELF_PAIRS]]
    return [pair for pair in closest if may_conflict(*pair)]


def features(
    statements: Sequence[str],
    sentences: Sequence[str],
    context: Sequence[Pair],
    own: Sequence[Pair],
    answers: Mapping[Pair, Probabilities],
    closest: Mapping[str, str],
    settled: Mapping[str, frozenset[str]] | None = None,
    known: frozenset[str] = frozenset(),
) -> tuple[dict[str, float], dict[str, Pair]]:
    """Features from the model's answers, and the pairs worth quoting: the most contradicted
    context pair ("context"), of those a sentence restates ("restated"), and of self pairs ("self").

    closest: each response sentence's most similar context statement (the one it restates, if
    any). A contradiction is read there: against other statements, "contradicted" mostly means
    "about a neighbouring fact". A pair that differs in no negation, number, name or opposite
    (`may_conflict`) counts as no contradiction.

    settled: per response sentence, figures that open no context pair (`arithmetic`: those a
    computing sentence takes from the context or works out from it).
    """
    read = set(context)
    settled = settled or {}
    answers = {
        pair: p
        if may_conflict(
            *pair, directed=pair in read, settled=settled.get(pair[1], frozenset()), known=known
        )
        else np.array([p[0], 0.0, p[2]], dtype=p.dtype)
        for pair, p in answers.items()
    }
    restated_pairs = [(closest[s], s) for s in sentences if (closest.get(s, ""), s) in answers]
    restated = [float(answers[pair][1]) for pair in restated_pairs]
    contra: dict[str, float] = {}
    support: dict[str, float] = {}
    covered: dict[str, float] = {}
    worst: Pair | None = None
    for pair in context:
        statement, sentence = pair
        p = answers[pair]
        if worst is None or p[1] > answers[worst][1]:
            worst = pair
        contra[sentence] = max(contra.get(sentence, 0.0), float(p[1]))
        support[sentence] = max(support.get(sentence, 0.0), float(p[0]))
        covered[statement] = max(covered.get(statement, 0.0), float(p[0]))
    own_contra = [float(answers[pair][1]) for pair in own]
    self_worst = max(own, key=lambda pair: answers[pair][1]) if own else None
    sentence_support = [support.get(s, 0.0) for s in sentences]
    statement_cover = [covered.get(s, 0.0) for s in statements]
    out = {
        "ctx_contra_max": max(contra.values(), default=0.0),
        "restated_contra_max": max(restated, default=0.0),
        "restated_contra_count": float(np.log1p(sum(c >= 0.5 for c in restated))),
        "self_contra_max": max(own_contra, default=0.0),
        "entailed_support_mean": float(np.mean(sentence_support)) if sentences else 0.0,
        # How many sentences nothing in the context supports (each added claim counts).
        "unsupported_log": float(np.log1p(sum(p < 0.5 for p in sentence_support))),
        "entailed_cover_mean": float(np.mean(statement_cover)) if statements else 0.0,
        "entailed_cover_share": float(np.mean([c >= 0.5 for c in statement_cover]))
        if statements
        else 0.0,
    }
    quotes: dict[str, Pair] = {}
    if worst is not None:
        quotes["context"] = worst
    if restated_pairs:
        quotes["restated"] = max(restated_pairs, key=lambda pair: answers[pair][1])
    if self_worst is not None:
        quotes["self"] = self_worst
    return out, quotes
