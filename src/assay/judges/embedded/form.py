"""How a response is built: order, repetition, run-on sentences, and explanations.

These are the cues behind `clear_structure` and `explains_when_needed`. Embeddings give the
sentence-to-sentence similarities; the rest is read from the words.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import numpy as np

from assay.judges.embedded import text as T
from assay.judges.embedded.encoder import Matrix

#: Two sentences at least this similar say the same thing again.
DUPLICATE = 0.92
#: Words from which a sentence reads as a run-on.
LONG_SENTENCE = 60
#: Longest phrase (in words) whose back-to-back repeats `looped_share` finds, and how many
#: times in a row make a loop ("very very" is English and does not count; "very very very" does).
LOOP_PHRASE = 4
LOOP_TIMES = 3

#: Markers that belong at an answer's end or start; out of place they show a broken order.
_CLOSING = re.compile(
    r"^\W*(?:overall|in summary|in conclusion|in short|to sum up|finally|lastly)\b", re.I
)
_ELABORATION = re.compile(r"[,;:]\s|\b(?:which|who|where|whose|when|while|so|to)\b", re.I)
_OPENING = re.compile(r"^\W*(?:first|firstly|to begin)\b", re.I)


def structure_features(
    written: Sequence[str],
    sentences: Sequence[str],
    self_sims: Matrix,
    response: str,
    topic_sims: Sequence[float],
    aligned_positions: Sequence[int | None],
) -> dict[str, float]:
    """written: the sentences as written (their lengths show run-ons).
    sentences: the units judged for meaning (run-ons cut at clauses), with
    self_sims: their pairwise similarities,
    topic_sims: each unit's similarity to the query (or to the context without one),
    aligned_positions: for each unit, the index of the context statement it restates, if any.
    """
    n = len(sentences)
    upper = [(i, j) for i in range(n) for j in range(i + 1, n)]
    repeats = [j for i, j in upper if self_sims[i, j] >= DUPLICATE]
    adjacent = [float(self_sims[i, i + 1]) for i in range(n - 1)]
    distant = [float(self_sims[i, j]) for i, j in upper if j > i + 1]
    lengths = [T.word_count(s) for s in written]
    misplaced = sum(1 for s in written[:-1] if _CLOSING.search(s)) + sum(
        1 for s in written[1:] if _OPENING.search(s)
    )
    return {
        "redundancy": max((float(self_sims[i, j]) for i, j in upper), default=0.0),
        "duplicate_share": len(set(repeats)) / n,
        "longest_sentence_log": math.log(max(lengths)),
        "mean_sentence_words": sum(lengths) / len(lengths),
        "long_sentence_share": sum(w > LONG_SENTENCE for w in lengths) / len(lengths),
        # Neighbours are more alike than distant sentences in a well-ordered text.
        "adjacency_gain": float(np.mean(adjacent) - np.mean(distant)) if distant else 0.0,
        "dependent_opening": float(n > 1 and T.dependent_opener(sentences[0])),
        "misplaced_markers": float(min(misplaced, 2)),
        "lexical_diversity": T.lexical_diversity(response),
        "first_sentence_rank": _first_rank(topic_sims),
        "dangling_reference": _dangling(sentences, self_sims),
        "order_agreement": _order_agreement(aligned_positions),
    }


def looped_share(sentence: str) -> float:
    """Share of a sentence's words inside a phrase of 1 to LOOP_PHRASE words said LOOP_TIMES
    times or more in a row ("the the the", "I think I think I think"): a decoder stuck in a
    loop. A phrase of numbers and one-letter symbols alone ("255.255.255.0", "n, m, n, m") is
    not a loop."""
    words = T.words(sentence)
    looped = [False] * len(words)
    for size in range(1, LOOP_PHRASE + 1):
        span = LOOP_TIMES * size
        for i in range(len(words) - span + 1):
            phrase = words[i : i + size]
            if words[i : i + span] == phrase * LOOP_TIMES and any(
                len(w) > 1 and w.isalpha() for w in phrase
            ):
                looped[i : i + span] = [True] * span
    return sum(looped) / len(words) if words else 0.0


def _first_rank(topic_sims: Sequence[float]) -> float:
    """Share of the other sentences that bear less on the topic than the first (an answer
    usually opens with what it is about)."""
    if len(topic_sims) < 2:
        return 1.0
    first = topic_sims[0]
    return sum(s < first for s in topic_sims[1:]) / (len(topic_sims) - 1)


def _dangling(sentences: Sequence[str], self_sims: Matrix) -> float:
    """Share of sentences that lean on an earlier one ("This", "However"...) but follow a
    sentence that is not the one they are most like."""
    leaning = [k for k in range(1, len(sentences)) if T.dependent_opener(sentences[k])]
    if not leaning:
        return 0.0
    lost = 0
    for k in leaning:
        others = [float(self_sims[k, j]) for j in range(len(sentences)) if j != k]
        lost += float(self_sims[k, k - 1]) < max(others)
    return lost / len(leaning)


def _order_agreement(positions: Sequence[int | None]) -> float:
    """Rank correlation between the order of the response's sentences and the order of the
    context statements they restate (0 when fewer than three restate one)."""
    pairs = [(k, p) for k, p in enumerate(positions) if p is not None]
    if len(pairs) < 3:
        return 0.0
    concordant = discordant = 0
    for a in range(len(pairs)):
        for b in range(a + 1, len(pairs)):
            sign = (pairs[b][1] - pairs[a][1]) * (pairs[b][0] - pairs[a][0])
            concordant += sign > 0
            discordant += sign < 0
    total = concordant + discordant
    return (concordant - discordant) / total if total else 0.0


# A why/how question (not "how many/much/long..."), or a request to explain, needs explaining.
_NEEDS_EXPLAINING = re.compile(
    r"\b(?:why|how(?! (?:many|much|long|often|old|far|soon|big|tall|early|late)\b)|"
    r"explain\w*|what (?:causes|makes|happens)|reason|difference)\b",
    re.I,
)


def explanation_features(sentences: Sequence[str], query: str | None) -> dict[str, float]:
    """Cues of explanation, and whether the query calls for one (a why/how question does; a
    request for a list or a fact needs none)."""
    counts = [T.explanation_markers(s) for s in sentences]
    markers = sum(counts)
    clauses = sum(len(_ELABORATION.findall(s)) for s in sentences)
    needed = 1.0 if query and _NEEDS_EXPLAINING.search(query) else 0.0
    return {
        "explanation_needed": needed,
        "unexplained_need": needed / (1.0 + markers),
        # Clauses that qualify or describe (", which", ": ...", "; ...") per sentence: bare
        # claims have none.
        "elaboration": min(clauses / len(sentences), 4.0),
        "explanation_markers_log": math.log1p(markers),
        "explained_share": sum(count > 0 for count in counts) / len(sentences),
    }
