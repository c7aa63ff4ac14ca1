"""One- or two-sentence explanations that cite the evidence behind each verdict.

An explanation is written for the label the user sees (the rounded probability ≥ 0.5): a
followed instruction's explanation says what the response does right and never reports a
problem; a broken one names the problem (the sentence, the missing statement, the conflict).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from assay.judges.embedded.signals import SEPARATOR, Evidence
from assay.judges.embedded.text import shorten
from assay.schema import round_probability

#: An agreement-model reading at least this sure is quoted as a contradiction.
CONTRADICTION_QUOTED = 0.5
#: A sentence with less than this share of its content words in the context is quoted as added.
GROUNDED = 0.5


def _quoted(joined: str, limit: int = 2) -> str:
    items = [f"'{shorten(s)}'" for s in joined.split(SEPARATOR) if s][:limit]
    return "; ".join(items)


def _terms(ev: Evidence) -> str:
    n = ev.notes
    return f"{n['covered_query_terms']} of {n['query_terms']} key query terms"


def _core_intent(ev: Evidence, ok: bool) -> str:
    f, n = ev.features, ev.notes
    if ok:
        return (
            f"The response engages the query directly (similarity {f['q_resp']:.2f}), "
            f"most of all in '{shorten(n['best_sentence'])}'; it uses {_terms(ev)}."
        )
    missing = f" (missing: {n['missing_query_terms']})" if n["missing_query_terms"] else ""
    return (
        f"The response does not address the query's intent (similarity {f['q_resp']:.2f}); "
        f"it uses {_terms(ev)}{missing}."
    )


def _prioritize(ev: Evidence, ok: bool) -> str:
    f, n = ev.features, ev.notes
    share = 1 - f["q_offtopic_share"]
    if ok:
        best = f"'{shorten(n['best_sentence'])}' bears most on the question"
        if n["best_sentence"] == ev.sentences[0]:
            return f"It puts the answer first: {best}."
        return f"It keeps to the question: {share:.0%} of its sentences bear on it, and {best}."
    if n["offtopic_sentences"]:
        return (
            f"Only {share:.0%} of its sentences bear on the question; it gives room to less "
            f"relevant material such as {_quoted(n['offtopic_sentences'], 1)}."
        )
    # Every sentence is near the subject, but none answers it squarely.
    return (
        f"Its sentences bear only loosely on the question (similarity {f['q_sent_mean']:.2f} "
        f"on average); the least relevant is {_quoted(n['worst_sentence'], 1)}."
    )


def _tangents(ev: Evidence, ok: bool) -> str:
    n = ev.notes
    if ok:
        return "Every sentence stays with the query's subject."
    stray = n["offtopic_sentences"] or n["least_fitting_sentence"]
    return f"Unrelated or tangential content: {_quoted(stray)}."


def _misinterpretation(ev: Evidence, ok: bool) -> str:
    f, n = ev.features, ev.notes
    if ok:
        return f"The response keeps the query's meaning: it addresses {_terms(ev)}."
    missing = f"; not addressed: {n['missing_query_terms']}" if n["missing_query_terms"] else ""
    return f"The response may answer a different question (similarity {f['q_resp']:.2f}){missing}."


def _aspects(ev: Evidence, ok: bool) -> str:
    n = ev.notes
    if not ev.query:  # the context's statements stand in for the query's parts
        if ok:
            return "No query was given; judged against the context, each of its points is answered."
        if n["missing_statements"]:
            missing = _quoted(n["missing_statements"], 1)
            return f"No query was given; of what the context covers, this is missing: {missing}."
        return (
            "No query was given; judged against the context, its points are answered only "
            f"loosely (the weakest match is {ev.features['aspect_cover_min']:.2f})."
        )
    if ok:
        return "Each part of the query is answered."
    return f"Part of the query is left unanswered: '{shorten(n['weakest_aspect'])}'."


def _coverage(ev: Evidence, ok: bool) -> str:
    n = ev.notes
    if ok:
        restated = f"{n['covered']} of {n['statements']} restated"
        return f"The response includes the context's key statements ({restated})."
    if n["missing_statements"]:
        return (
            f"The response covers only {n['covered']} of {n['statements']} context statements; "
            f"missing: {_quoted(n['missing_statements'])}."
        )
    # Every statement is touched: the check failed on how fully or how faithfully.
    f, total = ev.features, int(n["statements"])
    entailed = round(f["entailed_cover_share"] * total)
    if entailed == 0:
        return (
            f"It touches all {total} context statement(s), but the context does not support "
            "how it restates them."
        )
    if entailed < total:
        return (
            f"It touches all {total} context statement(s), but restates only {entailed} "
            "as the context states them."
        )
    # Covered and restated: what is left against it is its length, which the fit weighs on its
    # own (long answers were the complete ones in its human labels), so say so.
    informative = round(math.expm1(f["informative_words_log"]))
    context_words = round((informative + 1) / math.exp(f["info_ratio"]))
    return (
        f"It touches all {total} context statement(s), but says only {informative} informative "
        f"word(s) (the context has {context_words}), which the judge reads as incomplete."
    )


#: The agreement model's most contradicted pair (note), how sure it was (feature), and with what.
_MODEL_PAIRS = (
    ("contradicted_pair", "ctx_contra_max", "the context"),
    ("self_contradicted_pair", "self_contra_max", "itself"),
)


def _conflict(ev: Evidence) -> str:
    """The best-evidenced contradiction, with the context or within the response: a sure model
    reading, then a word-level conflict, then the likeliest model pair as a doubt."""
    n = ev.notes
    pairs = [
        (n[note].split(SEPARATOR), ev.features[key] >= CONTRADICTION_QUOTED, where)
        for note, key, where in _MODEL_PAIRS
        if n[note]
    ]
    for (first, second), sure, where in pairs:
        if sure:
            return f"'{shorten(second, 120)}' contradicts {where}: '{shorten(first, 120)}'"
    for note, where in (("context_conflict", "the context"), ("self_conflict", "itself")):
        if n[note]:
            kind, first, second = n[note].split(SEPARATOR)
            return f"'{shorten(second, 120)}' contradicts {where} ({kind}): '{shorten(first, 120)}'"
    if pairs:
        (first, second), _, where = pairs[0]
        return f"'{shorten(second, 120)}' may contradict {where}: '{shorten(first, 120)}'"
    return "its statements do not agree with the context"


def _faithful(ev: Evidence, ok: bool) -> str:
    if ok:
        # What was checked, not a claim that the response is supported (accurate_and_focused
        # judges that), and a finding, since no_contradiction may read the same pair otherwise.
        return (
            "It was not found to misread the context: no sentence changes the negation, "
            "numbers, names or sense of a statement it restates."
        )
    return f"It misrepresents the context: {_conflict(ev)}."


def _contradiction(ev: Evidence, ok: bool) -> str:
    if ok:
        return "Nothing in it was found to go against the context or against itself."
    return f"Contradiction: {_conflict(ev)}."


def _structure(ev: Evidence, ok: bool) -> str:
    f, n = ev.features, ev.notes
    if ok:
        words = f"{f['mean_sentence_words']:.0f}"
        if len(ev.sentences) == 1:
            return f"Clear structure: one sentence of {words} words."
        return (
            f"Clear structure: {len(ev.sentences)} sentences averaging {words} words, "
            "in a coherent order."
        )
    problems = []
    if n["looped_sentence"]:
        problems.append(f"it loops on one phrase: '{shorten(n['looped_sentence'], 70)}'")
    if n["repeated_sentence"]:
        problems.append(f"it repeats '{shorten(n['repeated_sentence'], 70)}'")
    if f["long_sentence_share"] > 0:
        problems.append("it runs several statements into one very long sentence")
    if f["dependent_opening"]:
        problems.append(
            f"it opens with '{shorten(ev.sentences[0], 70)}', which leans on text that is not there"
        )
    if f["misplaced_markers"]:
        problems.append("its ordering words (first, finally, overall) are out of place")
    if f["lexical_diversity"] < 0.4 and not n["looped_sentence"]:  # a loop says it already
        problems.append("it repeats the same words over and over")
    if not problems:
        problems.append("its sentences do not follow on from one another")
    return "Hard to follow: " + "; ".join(problems[:2]) + "."


def _explains(ev: Evidence, ok: bool) -> str:
    f = ev.features
    total = len(ev.sentences)
    explained = round(f["explained_share"] * total)
    if ok:
        if explained:
            return (
                f"It explains its points: {explained} of {total} sentence(s) "
                "give a reason or an example."
            )
        return "Its points are simple enough to stand without further explanation."
    return (
        f"Its claims come without explanation: {total - explained} of {total} sentence(s) "
        "give no reason or example (because, for example, such as…)."
    )


def _accurate(ev: Evidence, ok: bool) -> str:
    f, n = ev.features, ev.notes
    grounded = 1 - f["unsupported_share"]
    if ok:
        return (
            f"It stays with what the context supports: {grounded:.0%} of its sentences "
            "are grounded in it."
        )
    added = n["ctx_offtopic_sentences"] or n["unsupported_sentences"]
    if added:
        return f"It adds content the context does not support: {_quoted(added, 1)}."
    if n["least_grounded_sentence"] and f["grounding_min"] < GROUNDED:
        quote, share = _quoted(n["least_grounded_sentence"], 1), f"{f['grounding_min']:.0%}"
        return (
            f"It adds content the context does not support: {quote} "
            f"(only {share} of its words are in the context)."
        )
    if grounded < 1:
        return (
            f"It represents the context loosely: only {grounded:.0%} of its sentences "
            "are grounded in it."
        )
    return (
        "It represents the context loosely: the context supports its sentences only weakly "
        f"(agreement {f['entailed_support_mean']:.2f} on average)."
    )


EXPLAINERS: dict[str, Callable[[Evidence, bool], str]] = {
    "core_intent": _core_intent,
    "prioritize_relevant": _prioritize,
    "no_tangents": _tangents,
    "no_misinterpretation": _misinterpretation,
    "query_aspects": _aspects,
    "key_information": _coverage,
    "no_omissions": _coverage,
    "faithful_interpretation": _faithful,
    "clear_structure": _structure,
    "explains_when_needed": _explains,
    "no_contradiction": _contradiction,
    "accurate_and_focused": _accurate,
}


def explain(check: str, ev: Evidence, probability: float) -> str:
    """The explanation for the label the wire will carry (from the rounded probability)."""
    return EXPLAINERS[check](ev, round_probability(probability) >= 0.5)
