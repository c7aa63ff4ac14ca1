"""One- or two-sentence explanations that cite the evidence behind each verdict."""

from __future__ import annotations

from collections.abc import Callable

from assay.judges.embedded.signals import Evidence
from assay.judges.embedded.text import shorten

SEPARATOR = "\u241e"


def _quoted(joined: str, limit: int = 2) -> str:
    items = [f"'{shorten(s)}'" for s in joined.split(SEPARATOR) if s][:limit]
    return "; ".join(items)


def _core_intent(ev: Evidence, ok: bool) -> str:
    f, n = ev.features, ev.notes
    terms = f"it uses {n['covered_query_terms']} of {n['query_terms']} key query terms"
    if ok:
        return (
            f"The response engages the query directly (similarity {f['q_resp']:.2f}); "
            f"its closest sentence is '{shorten(n['best_sentence'])}' and {terms}."
        )
    missing = f" (missing: {n['missing_query_terms']})" if n["missing_query_terms"] else ""
    return (
        f"The response does not match the query's intent (similarity {f['q_resp']:.2f}); "
        f"{terms}{missing}."
    )


def _prioritize(ev: Evidence, ok: bool) -> str:
    f, n = ev.features, ev.notes
    share = 1 - f["q_offtopic_share"]
    lead = f"{share:.0%} of its sentences bear on the question"
    if ok:
        return f"Most of the response is on point: {lead}, led by '{shorten(n['best_sentence'])}'."
    return f"The response gives weight to less relevant material: only {lead}."


def _tangents(ev: Evidence, ok: bool) -> str:
    n = ev.notes
    if n["offtopic_sentences"]:
        prefix = "Minor drift only: " if ok else "Unrelated or tangential content: "
        return prefix + _quoted(n["offtopic_sentences"]) + "."
    if ok:
        return "Every sentence relates to the query; no tangents found."
    return f"The weakest sentence, '{shorten(n['worst_sentence'])}', strays from the query."


def _misinterpretation(ev: Evidence, ok: bool) -> str:
    f, n = ev.features, ev.notes
    if ok:
        return (
            f"The response keeps the query's meaning: {n['covered_query_terms']} of "
            f"{n['query_terms']} key terms are addressed (similarity {f['q_resp']:.2f})."
        )
    missing = f"; not addressed: {n['missing_query_terms']}" if n["missing_query_terms"] else ""
    return f"The response may answer a different question (similarity {f['q_resp']:.2f}){missing}."


def _aspects(ev: Evidence, ok: bool) -> str:
    f, n = ev.features, ev.notes
    if ok:
        return f"Each part of the query is answered (weakest coverage {f['aspect_cover_min']:.2f})."
    return (
        f"Part of the query is left unanswered: '{shorten(n['weakest_aspect'])}' "
        f"(coverage {f['aspect_cover_min']:.2f})."
    )


def _coverage(ev: Evidence, ok: bool) -> str:
    n = ev.notes
    head = f"The response covers {n['covered']} of {n['statements']} context statements"
    if n["missing_statements"]:
        return f"{head}; missing: {_quoted(n['missing_statements'])}."
    return f"{head}." if ok else f"{head}, several only loosely."


def _faithful(ev: Evidence, ok: bool) -> str:
    n = ev.notes
    if n["unsupported_sentences"] and not ok:
        return f"Not supported by the context: {_quoted(n['unsupported_sentences'])}."
    if n["unsupported_sentences"]:
        return f"Mostly grounded; loosely supported: {_quoted(n['unsupported_sentences'], 1)}."
    return "Every sentence of the response is supported by a context statement."


def _structure(ev: Evidence, ok: bool) -> str:
    f = ev.features
    detail = (
        f"{len(ev.sentences)} sentences averaging {f['mean_sentence_words']:.0f} words, "
        f"adjacent-sentence coherence {f['adjacent_coherence']:.2f}"
    )
    if f["redundancy"] >= 0.9:
        detail += f", some repetition (max similarity {f['redundancy']:.2f})"
    return ("Clear structure: " if ok else "Hard to follow: ") + detail + "."


def _explains(ev: Evidence, ok: bool) -> str:
    f = ev.features
    count = round(f["explanation_rate"] * len(ev.sentences))
    cues = "because, for example, such as…"
    text = f"{count} explanatory cue(s) ({cues}) in {len(ev.sentences)} sentences"
    return ("The response explains itself: " if ok else "Little explanation: ") + text + "."


def _contradiction(ev: Evidence, ok: bool) -> str:
    n = ev.notes
    found = []
    if n["negation_conflict"]:
        found.append(f"context vs response: '{shorten(n['negation_conflict'], 140)}'")
    if n["self_conflict"]:
        found.append(f"within the response: '{shorten(n['self_conflict'], 140)}'")
    if n["unsupported_numbers"]:
        found.append(f"numbers not in the context: {n['unsupported_numbers']}")
    if not found:
        return "No conflicting statements or unsupported figures found."
    return ("Possible conflict, " if ok else "Conflict, ") + "; ".join(found) + "."


def _accurate(ev: Evidence, ok: bool) -> str:
    f, n = ev.features, ev.notes
    head = (
        f"Covers {n['covered']} of {n['statements']} context statements; "
        f"{1 - f['unsupported_share']:.0%} of its sentences are grounded"
    )
    if not ok and n["unsupported_sentences"]:
        return f"{head}; off-context: {_quoted(n['unsupported_sentences'], 1)}."
    return head + "."


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
    return EXPLAINERS[check](ev, probability >= 0.5)
