"""One- or two-sentence explanations that cite the evidence behind each verdict.

An explanation is written for the label the user sees (the rounded probability ≥ 0.5): a
followed instruction's explanation says what the response does right and never reports a
problem; a broken one names the problem (the sentence, the missing statement, the conflict).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

from assay.judges.embedded.signals import SEPARATOR, Evidence
from assay.judges.embedded.text import shorten
from assay.schema import followed, round_probability

#: How much each feature moved this item's logit for the check being explained (weight ×
#: standardised value, signed so that negative pushed towards "not followed").
Pull = Mapping[str, float]

#: An agreement-model reading at least this sure is quoted as a contradiction.
CONTRADICTION_QUOTED = 0.5
#: A sentence with less than this share of its content words in the context is quoted as added.
GROUNDED = 0.5


def _quoted(joined: str, limit: int = 2, of: int = 0) -> str:
    """The first `limit` texts, quoted; with `of` (how many there are in all), a count of the
    rest, so "covers 0 of 3 …; missing:" never lists two and leaves the third unsaid."""
    items = [f"'{shorten(s)}'" for s in joined.split(SEPARATOR) if s][:limit]
    rest = of - len(items)
    return "; ".join(items) + (f" and {rest} more" if rest > 0 else "")


def _count(number: int, noun: str) -> str:
    """ "1 sentence", "3 sentences"."""
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def _all_terms(ev: Evidence) -> bool:
    n = ev.notes
    return int(n["query_terms"]) > 0 and n["covered_query_terms"] == n["query_terms"]


def _terms(ev: Evidence) -> str:
    """'; it uses 1 of 3 key query terms (missing: ...)', or nothing for a query without any."""
    n = ev.notes
    if int(n["query_terms"]) == 0:
        return ""
    missing = f" (missing: {n['missing_query_terms']})" if n["missing_query_terms"] else ""
    return f"; it uses {n['covered_query_terms']} of {n['query_terms']} key query terms{missing}"


def _core_intent(ev: Evidence, ok: bool, pull: Pull) -> str:
    f, n = ev.features, ev.notes
    if ok:
        terms = f"; it uses all {n['query_terms']} key query terms" if _all_terms(ev) else ""
        return (
            f"The response engages the query directly (similarity {f['q_resp']:.2f}), "
            f"most of all in '{shorten(n['best_sentence'])}'{terms}."
        )
    return (
        f"The response does not address the query's intent (similarity {f['q_resp']:.2f})"
        f"{_terms(ev)}."
    )


def _prioritize(ev: Evidence, ok: bool, pull: Pull) -> str:
    f, n = ev.features, ev.notes
    share = 1 - f["q_offtopic_share"]
    if ok:
        best = f"'{shorten(n['best_sentence'])}' bears most on the question"
        if n["best_sentence"] == ev.sentences[0]:
            return f"It puts the answer first: {best}."
        return f"It keeps to the question: {share:.0%} of its sentences bear on it, and {best}."
    if len(ev.sentences) == 1:
        return (
            f"Its one sentence bears only loosely on the question (similarity "
            f"{f['q_sent_mean']:.2f}): {_quoted(ev.sentences[0], 1)}."
        )
    if n["offtopic_sentences"] and share == 0:
        return (
            "None of its sentences bears squarely on the question; the least relevant is "
            f"{_quoted(n['worst_sentence'], 1)}."
        )
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


def _tangents(ev: Evidence, ok: bool, pull: Pull) -> str:
    n = ev.notes
    if ok:
        return "Every sentence stays with the query's subject."
    stray = n["offtopic_sentences"] or n["least_fitting_sentence"]
    return f"Unrelated or tangential content: {_quoted(stray)}."


def _misinterpretation(ev: Evidence, ok: bool, pull: Pull) -> str:
    f, n = ev.features, ev.notes
    if ok:
        if _all_terms(ev):
            terms = n["query_terms"]
            return (
                f"The response keeps the query's meaning: it addresses all {terms} key query terms."
            )
        return f"The response keeps the query's meaning (similarity {f['q_resp']:.2f})."
    missing = f"; not addressed: {n['missing_query_terms']}" if n["missing_query_terms"] else ""
    return f"The response may answer a different question (similarity {f['q_resp']:.2f}){missing}."


def _aspects(ev: Evidence, ok: bool, pull: Pull) -> str:
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


def _about(n: dict[str, str]) -> str:
    """ " about the query" when documents about something else were set aside (`in_play`)."""
    return " about the query" if int(n.get("set_aside", "0")) else ""


def _statements(n: dict[str, str], total: int) -> str:
    """ "the context's one statement", "both / all 3 context statements (about the query)"."""
    if total == 1:
        return (
            "the one context statement about the query"
            if _about(n)
            else "the context's one statement"
        )
    return f"{'both' if total == 2 else f'all {total}'} context statements{_about(n)}"


def _context(n: dict[str, str]) -> str:
    return "context about the query" if _about(n) else "context"


def _missing(n: dict[str, str], covered: int, total: int) -> str:
    return (
        f"The response covers only {covered} of {_count(total, 'context statement')}{_about(n)}; "
        f"missing: {_quoted(n['missing_statements'], of=total - covered)}."
    )


def _key_information(ev: Evidence, ok: bool, pull: Pull) -> str:
    n = ev.notes
    covered, total = int(n["covered"]), int(n["statements"])
    if ok:
        if covered == total:
            restated = _statements(n, total)
            return f"The response includes the context's key information: it restates {restated}."
        if covered:
            return (
                "The response includes what the judge reads as the context's key information, "
                f"such as {_quoted(n['restated_statements'], 1)}."
            )
        return "The response conveys the context's key information in its own words."
    if n["missing_statements"]:
        return _missing(n, covered, total)
    # Every statement is touched: the check failed on how faithfully they are restated.
    entailed = round(ev.features["entailed_cover_share"] * total)
    if entailed == 0:
        return (
            f"It touches {_statements(n, total)}, but the context does not support how it "
            "restates them."
        )
    return (
        f"It touches {_statements(n, total)}, but restates only {entailed} as the context "
        "states them."
    )


def _omissions(ev: Evidence, ok: bool, pull: Pull) -> str:
    n, f = ev.notes, ev.features
    covered, total = int(n["covered"]), int(n["statements"])
    if ok:
        if covered == total:
            return f"It gives the details the query needs: it restates {_statements(n, total)}."
        if covered:
            return (
                "It gives the details the query needs, such as "
                f"{_quoted(n['restated_statements'], 1)}."
            )
        return "It gives the details the query needs, in its own words."
    if n["missing_statements"]:
        return _missing(n, covered, total)
    # Every statement is touched: the check failed on how fully they are restated.
    entailed = round(f["entailed_cover_share"] * total)
    if entailed < total:
        unread = "it" if total == 1 else f"{total - entailed} of them"
        return (
            f"It touches {_statements(n, total)}, but the judge does not read {unread} as "
            "restated in full, so details may be left out."
        )
    # Covered and restated: what is left against it is its length, which the fit weighs on its
    # own (long answers were the complete ones in its human labels), so say so.
    informative = round(math.expm1(f["informative_words_log"]))
    context_words = round((informative + 1) / math.exp(f["info_ratio"]))
    if informative < context_words:
        return (
            f"It touches {_statements(n, total)}, but says only "
            f"{_count(informative, 'informative word')} (the {_context(n)} has {context_words}), "
            "which the judge reads as incomplete."
        )
    return (
        f"It touches {_statements(n, total)} in {_count(informative, 'informative word')} (the "
        f"{_context(n)} has {context_words}), but the judge does not read it as complete: "
        "answers of this length were often incomplete in its training labels."
    )


#: Where each contradiction feature's evidence is quoted from: (note, what it contradicts, whether
#: the note is a word-level conflict "kind␞first␞second" rather than an agreement-model pair).
_CONFLICT_NOTES = {
    "restated_contra_max": ("restated_contradicted_pair", "the context", False),
    "restated_contra_count": ("restated_contradicted_pair", "the context", False),
    "ctx_contra_max": ("contradicted_pair", "the context", False),
    "self_contra_max": ("self_contradicted_pair", "an earlier sentence", False),
    "self_conflict": ("self_conflict", "an earlier sentence", True),
    **{
        f"ctx_conflict_{kind}": ("context_conflict", "the context", True)
        for kind in ("negation", "number", "name", "opposite")
    },
}
#: The model reading behind each model-pair note (how sure it is that the pair conflicts).
_MODEL_READING = {
    "restated_contradicted_pair": "restated_contra_max",
    "contradicted_pair": "ctx_contra_max",
    "self_contradicted_pair": "self_contra_max",
}


def _conflict(ev: Evidence, pull: Pull) -> str:
    """The contradiction that weighed most against the label (the feature that pulled the
    probability down furthest and has a pair to quote); a model reading under 0.5 is a doubt."""
    n = ev.notes
    ranked = sorted(
        (value, feature) for feature, value in pull.items() if feature in _CONFLICT_NOTES
    )
    for _, feature in ranked:
        note, where, word_level = _CONFLICT_NOTES[feature]
        if not n.get(note):
            continue
        if word_level:
            kind, first, second = n[note].split(SEPARATOR)
            return f"'{shorten(second, 120)}' contradicts {where} ({kind}): '{shorten(first, 120)}'"
        first, second = n[note].split(SEPARATOR)
        sure = ev.features[_MODEL_READING[note]] >= CONTRADICTION_QUOTED
        verb = "contradicts" if sure else "may contradict"
        return f"'{shorten(second, 120)}' {verb} {where}: '{shorten(first, 120)}'"
    return "its statements do not agree with the context"


def _faithful(ev: Evidence, ok: bool, pull: Pull) -> str:
    if ok:
        # What was checked, not a claim that the response is supported (accurate_and_focused
        # judges that), and a finding, since no_contradiction may read the same pair otherwise.
        return (
            "It was not found to misread the context: no sentence changes the negation, "
            "numbers, names or sense of a statement it restates."
        )
    return f"It misrepresents the context: {_conflict(ev, pull)}."


def _contradiction(ev: Evidence, ok: bool, pull: Pull) -> str:
    if ok:
        return "Nothing in it was found to go against the context or against itself."
    return f"Contradiction: {_conflict(ev, pull)}."


def _structure(ev: Evidence, ok: bool, pull: Pull) -> str:
    f, n = ev.features, ev.notes
    if ok:
        words = round(f["mean_sentence_words"])
        if len(ev.sentences) == 1:
            return f"Clear structure: one sentence of {_count(words, 'word')}."
        return (
            f"Clear structure: {len(ev.sentences)} sentences averaging {_count(words, 'word')}, "
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


def _explains(ev: Evidence, ok: bool, pull: Pull) -> str:
    f = ev.features
    total = len(ev.sentences)
    explained = round(f["explained_share"] * total)
    if ok:
        if explained:
            which = (
                "its one sentence gives"
                if total == 1
                else f"{explained} of its {total} sentences {'gives' if explained == 1 else 'give'}"
            )
            return f"It explains its points: {which} a reason or an example."
        return "Its points are simple enough to stand without further explanation."
    if total == 1:
        bare = "its one sentence gives no reason or example"
    elif explained == 0:
        bare = f"none of its {total} sentences gives a reason or example"
    else:
        bare = (
            f"{total - explained} of its {total} sentences "
            f"{'gives' if total - explained == 1 else 'give'} no reason or example"
        )
    return f"Its claims come without explanation: {bare} (because, for example, such as…)."


def _accurate(ev: Evidence, ok: bool, pull: Pull) -> str:
    f, n = ev.features, ev.notes
    grounded = 1 - f["unsupported_share"]
    if ok:
        if grounded < GROUNDED:  # too short to ground ("No.", a bare number): nothing was added
            return "No claim beyond what the context states was found in it."
        return (
            f"It stays with what the context supports: {grounded:.0%} of its sentences "
            "are grounded in it."
        )
    invented = pull.get("unstated_number_share", 0.0)
    if n["unstated_sentence"] and invented < 0 and invented == min(pull.values()):
        return (
            f"It states figures the context does not give ({n['unstated_numbers']}): "
            f"{_quoted(n['unstated_sentence'], 1)}."
        )
    added = n["ctx_offtopic_sentences"] or n["unsupported_sentences"]
    if added:
        return f"It adds content the context does not support: {_quoted(added, 1)}."
    if n["least_grounded_sentence"] and f["grounding_min"] < GROUNDED:
        quote, share = _quoted(n["least_grounded_sentence"], 1), f"{f['grounding_min']:.0%}"
        sources = "the context or the question" if ev.query else "the context"
        return (
            f"It adds content the context does not support: {quote} "
            f"(only {share} of its words are in {sources})."
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


EXPLAINERS: dict[str, Callable[[Evidence, bool, Pull], str]] = {
    "core_intent": _core_intent,
    "prioritize_relevant": _prioritize,
    "no_tangents": _tangents,
    "no_misinterpretation": _misinterpretation,
    "query_aspects": _aspects,
    "key_information": _key_information,
    "no_omissions": _omissions,
    "faithful_interpretation": _faithful,
    "clear_structure": _structure,
    "explains_when_needed": _explains,
    "no_contradiction": _contradiction,
    "accurate_and_focused": _accurate,
}


def explain(check: str, ev: Evidence, probability: float, pull: Pull | None = None) -> str:
    """The explanation for the label the wire will carry (from the rounded probability).

    pull: each feature's term of the check's logit (`Logistic.pull`), which says what weighed
    most where several findings could be quoted."""
    return EXPLAINERS[check](ev, followed(round_probability(probability)), pull or {})
