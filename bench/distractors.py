"""Completeness with retrieved documents about something else: ragchecker's pairs again, each
context now holding, besides the question's reference, the reference of another question.

A retriever returns several documents and not all are about the question; the dev rows have
one document each. Here each ragchecker context gets a second document: the reference of the
most similar other question (a near miss, as retrieval gives) or of a question drawn at random.
The right verdicts do not change, since the human judgements are about the question's own
reference, so the pairwise accuracy should stay where it is with one document.

Out of fold like `calibrate.py`: a fold's rows, with their second documents, are scored by a
calibration fitted on the other four folds' ordinary (one-document) rows and read by the
agreement model cross-fitted for that fold. The documents-in-play rule (`signals.in_play`) is
what this measures, against the same rows with every document counted (as before it).

It also measures a tangent the context supports: each ragchecker answer against a copy with one
sentence of the second document put in (true, but about another question), which the score
should rank below the answer.

    python bench/distractors.py [--no-write]
"""

from __future__ import annotations

import dataclasses
import random

import numpy as np

import common
from assay.detectors import DETECTORS
from assay.judges.embedded import signals
from assay.judges.embedded.encoder import load_encoder
from assay.judges.embedded.text import split_sentences
from calibrate import (
    build_table,
    cross_fitted_features,
    fold_fits,
    markdown,
    out_of_fold,
    ragchecker_sides,
)
from common import pairwise
from pairs import DevSet, Row, dev_set

DETECTOR = "completeness"
SEED = 3


def second_documents(rows: list[Row]) -> dict[str, dict[str, str]]:
    """group -> {"nearest": reference of the most similar other question, "random": of a
    question drawn at random}, over ragchecker's groups."""
    refs: dict[str, tuple[str, str]] = {}
    for row in rows:
        if row.source == "ragchecker":
            refs.setdefault(row.group, (row.query or "", row.context[0]))
    names = sorted(refs)
    vectors = load_encoder("minilm").encode([refs[g][0] for g in names])
    sims = vectors @ vectors.T
    rng = random.Random(SEED)
    out = {}
    for i, group in enumerate(names):
        nearest = next(names[j] for j in np.argsort(-sims[i]) if names[j] != group)
        drawn = rng.choice([g for g in names if g != group])
        out[group] = {"nearest": refs[nearest][1], "random": refs[drawn][1]}
    return out


def figures(probs: np.ndarray, data: DevSet) -> tuple[str, str]:
    good, bad = ragchecker_sides(data)
    score, mean = (probs >= 0.5).mean(axis=1), probs.mean(axis=1)
    return f"{pairwise(score[good], score[bad]):.3f}", f"{pairwise(mean[good], mean[bad]):.3f}"


def with_tangent(row: Row, document: str, rng: random.Random) -> Row:
    """`row` with one sentence of `document` put between two of its sentences (or at its end)."""
    sentences = split_sentences(row.response)
    at = rng.randrange(1, len(sentences) + 1)
    added = rng.choice(split_sentences(document))
    return dataclasses.replace(row, response=" ".join([*sentences[:at], added, *sentences[at:]]))


def tangent_figures(plain: np.ndarray, added: np.ndarray, check: int) -> list[str]:
    """How often the answer without the tangent is ahead: by score, and by `check`'s p."""
    score = pairwise((plain >= 0.5).mean(axis=1), (added >= 0.5).mean(axis=1))
    return [f"{score:.3f}", f"{pairwise(plain[:, check], added[:, check]):.3f}"]


def main() -> None:
    args = common.script_parser(__doc__).parse_args()
    data = dev_set()
    table = build_table(data, DETECTOR)
    human = table.rows[: table.n_human]
    seconds = second_documents(human)
    fits = fold_fits(table)  # fitted once; every reading below is scored by the same fits
    one = figures(out_of_fold(table, table.features[: table.n_human], fits), data)
    rows = [("one document (as in calibrate.py)", *one, *one)]
    tangents = []
    floor = signals.IN_PLAY_FLOOR
    focused = [i.check for i in DETECTORS[DETECTOR].instructions].index("accurate_and_focused")
    rc = np.array([r.source == "ragchecker" for r in human])
    for which in ("nearest", "random"):
        widened = [
            dataclasses.replace(r, context=(*r.context, seconds[r.group][which]))
            if r.source == "ragchecker"
            else r
            for r in human
        ]
        rng = random.Random(f"{SEED}-{which}")
        padded = [
            with_tangent(r, seconds[r.group][which], rng) if r.source == "ragchecker" else r
            for r in widened
        ]
        found, moved = [], []
        for rule_floor in (floor, -1.0):  # -1: no document is ever under it, so all count
            signals.IN_PLAY_FLOOR = rule_floor
            plain = out_of_fold(table, cross_fitted_features(DETECTOR, widened), fits)
            found += figures(plain, data)
            added = out_of_fold(table, cross_fitted_features(DETECTOR, padded), fits)
            moved += tangent_figures(plain[rc], added[rc], focused)
        signals.IN_PLAY_FLOOR = floor
        other = "the most similar" if which == "nearest" else "a random"
        rows.append((f"+ {other} other question's reference", *found))
        tangents.append((f"{other} other question's reference", *moved))
    text = (
        f"ragchecker non-tie pairs ({len(ragchecker_sides(data)[0])}), out of fold; pairwise "
        "accuracy (ties half) of the score and of the mean follow_probability.\n\n"
        + markdown(
            (
                "context",
                "score, documents in play",
                "mean, documents in play",
                "score, every document counted",
                "mean, every document counted",
            ),
            rows,
        )
        + f"\n\nA tangent the context supports: each of the {int(rc.sum())} ragchecker answers "
        "against a copy with one sentence of the second document put in at random; share of "
        "pairs where the answer without it scores higher (ties half), for the score and for "
        "accurate_and_focused's probability.\n\n"
        + markdown(
            (
                "second document",
                "score, documents in play",
                "accurate_and_focused, documents in play",
                "score, every document counted",
                "accurate_and_focused, every document counted",
            ),
            tangents,
        )
    )
    print(text)
    if not args.no_write:
        common.write_section(
            "Completeness with a second document",
            __doc__.split("\n\n    python")[0] + "\n\n" + text,
        )


if __name__ == "__main__":
    main()
