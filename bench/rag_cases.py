"""Hand-written RAG cases: does the shipped judge prefer a correct answer to a flawed copy?

The dev data's answers are long and their contexts long; a support bot's are often one or two
sentences. These case sets (`bench/data/rag_cases_*.yaml`, written for Assay) give, per
question, short documents, a correct answer, copies of it with one flaw each (a changed
number, a negation, a swapped name, an invented claim, an omission, an answer to another
question, a tangent, an invented fact where the context has none and the correct answer says
so), and sometimes other correct answers (short, bulleted). Set H has four documents per
question, only some of them about it. None of their rows is used for fitting. For each flaw kind this prints the share of pairs where the correct answer scores
strictly higher, ties, and lower (completeness and output_relevance score), and the pairwise
accuracy (ties half) of the instructions the flaw names; then the share of correct answers
that pass each instruction.

    python bench/rag_cases.py [--no-write]
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import yaml

import common
from assay import Client

DATA = Path(__file__).parent / "data"
#: What each set is, for the table: how it was used.
SETS = {
    "a": "set A: read while changing the judge (2026-12-05)",
    "b": "set B: written apart, scored once held out (see DEVELOPERS.md), then read while "
    "changing the judge",
    "c": "set C: written apart after the changes of 2026-12-05, never read while changing the "
    "judge until the floor of the documents-in-play rule (2026-12-06) was chosen on sets A–G",
    "d": "set D: written apart like C, read like C",
    "e": "set E: written apart like C, scored for two changes tried after it and not kept, read "
    "like C",
    "f": "set F: written apart after the last change of 2026-12-05, scored once (held out), then "
    "read like C",
    "g": "set G: written apart by a helper who saw no judge output (2026-12-05, fourth "
    "session), scored for the judge before and after durations and dates were read in one "
    "unit, and for a variant not kept (see DEVELOPERS.md), read like C",
    "h": "set H: written apart by a helper who saw no judge output (2026-12-06, tenth session; "
    "four documents per question, only some about it), scored for the judge before the "
    "documents-in-play rule and twice with it (margin alone, then with the floor; see "
    "DEVELOPERS.md), after the sentence that says less, after worked-out figures (2026-12-07; "
    "unchanged) and the asker's words; read once, after the last change of 2026-12-07 (its "
    "correct answers failing accurate_and_focused were listed), so no longer held out",
    "i": "set I: written apart by a helper who saw no judge output (2026-12-07, eleventh session; "
    "two to four documents per question, twelve of twenty questions need a figure worked out), "
    "scored once for the judge before and after worked-out figures, then for the asker's words "
    "read as grounded (seen while deciding to keep it), for figures read whole (unchanged) and "
    "for the asker's figures (seen while deciding), for a consequence-clause rule not kept and "
    "for figures stated elsewhere and opposites both sides use (2026-12-07, thirteenth session; "
    "seen while deciding), for the calibration refitted on a rebuilt bench cache (fourteenth "
    "session; no choice made on it) and for prices read with their currency (seventeenth "
    "session; seen while deciding); never read case by case",
}
#: The instructions each flaw names, by detector.
TARGETS: dict[str, dict[str, tuple[str, ...]]] = {
    "changed_number": {"completeness": ("faithful_interpretation", "no_contradiction")},
    "negation": {"completeness": ("faithful_interpretation", "no_contradiction")},
    "swapped_entity": {"completeness": ("faithful_interpretation", "no_contradiction")},
    "self_contradiction": {"completeness": ("no_contradiction",)},
    "invented_claim": {"completeness": ("accurate_and_focused",)},
    "invented_when_unknown": {"completeness": ("faithful_interpretation", "accurate_and_focused")},
    "omission": {"completeness": ("key_information", "no_omissions")},
    "other_question": {
        "completeness": ("query_aspects",),
        "output_relevance": ("core_intent", "no_misinterpretation"),
    },
    "tangent": {
        "completeness": ("accurate_and_focused",),
        "output_relevance": ("prioritize_relevant", "no_tangents"),
    },
}
DETECTORS = ("completeness", "output_relevance")


def load(name: str) -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = yaml.safe_load((DATA / f"rag_cases_{name}.yaml").read_text())
    for case in cases:
        for flawed in case["flawed"]:
            if flawed["kind"] not in TARGETS:
                raise SystemExit(f"{case['id']}: unknown flaw kind {flawed['kind']!r}")
    return cases


def judge(cases: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """(case id, answer) -> {detector: result}, every answer of every case."""
    items, keys = [], []
    for case in cases:
        answers = [case["good"], *(f["answer"] for f in case["flawed"]), *case.get("also_good", [])]
        for answer in answers:
            keys.append((case["id"], answer))
            items.append(
                {
                    "user_query": case["query"],
                    "context": case["context"],
                    "generated_text": answer,
                    "config": {d: {} for d in DETECTORS},
                }
            )
    results = Client().inference.detect(body=items)
    return {
        key: {d: result[d] for d in DETECTORS} for key, result in zip(keys, results, strict=True)
    }


def _probabilities(result: dict[str, Any]) -> dict[str, tuple[float, bool]]:
    return {
        i["instruction"]: (i["follow_probability"], i["label"]) for i in result["instructions_list"]
    }


def _check_names(detector: str) -> dict[str, str]:
    from assay.detectors import DETECTORS as ALL

    return {i.text: i.check for i in ALL[detector].instructions}


def pair_table(cases: list[dict[str, Any]], scored: dict[tuple[str, str], Any]) -> str:
    names = {d: _check_names(d) for d in DETECTORS}
    rows: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for case in cases:
        good = scored[(case["id"], case["good"])]
        for flawed in case["flawed"]:
            bad = scored[(case["id"], flawed["answer"])]
            row = rows[flawed["kind"]]
            for detector, checks in TARGETS[flawed["kind"]].items():
                g, b = good[detector]["score"], bad[detector]["score"]
                row[f"{detector} higher"].append(float(g > b))
                row[f"{detector} tie"].append(float(g == b))
                row[f"{detector} lower"].append(float(g < b))
                gp = {names[detector][k]: v for k, v in _probabilities(good[detector]).items()}
                bp = {names[detector][k]: v for k, v in _probabilities(bad[detector]).items()}
                for check in checks:
                    (pg, _), (pb, _) = gp[check], bp[check]
                    row[f"p {check}"].append(1.0 if pg > pb else 0.5 if pg == pb else 0.0)
                    row[f"label {check}"].append(
                        1.0
                        if gp[check][1] > bp[check][1]
                        else 0.5
                        if gp[check][1] == bp[check][1]
                        else 0.0
                    )
    lines = [
        "| flaw | pairs | completeness: good higher / tie / lower | output_relevance: good higher / tie / lower | named instructions: probability, label (pairwise, ties half) |",
        "|---|---:|---|---|---|",
    ]
    for kind, row in sorted(rows.items()):
        pairs = len(row["completeness higher"] or row["output_relevance higher"])

        named = "; ".join(
            f"{key[2:]} {_mean(row[key]):.2f}, {_mean(row['label ' + key[2:]]):.2f}"
            for key in row
            if key.startswith("p ")
        )
        lines.append(
            f"| {kind} | {pairs} | {_split(row, 'completeness')} | {_split(row, 'output_relevance')} | {named} |"
        )
    return "\n".join(lines)


def pass_table(cases: list[dict[str, Any]], scored: dict[tuple[str, str], Any]) -> str:
    """Share of correct answers (the good one and any other correct one) passing each check."""
    counts: dict[str, list[float]] = defaultdict(list)
    scores: dict[str, list[float]] = defaultdict(list)
    for case in cases:
        for answer in [case["good"], *case.get("also_good", [])]:
            for detector in DETECTORS:
                result = scored[(case["id"], answer)][detector]
                scores[detector].append(result["score"])
                names = _check_names(detector)
                for text, (_, label) in _probabilities(result).items():
                    counts[names[text]].append(float(label))
    parts = [f"{check} {_mean(v):.2f}" for check, v in counts.items()]
    means = ", ".join(f"{d} {_mean(scores[d]):.2f}" for d in DETECTORS)
    return (
        f"Correct answers ({len(scores['completeness'])}): mean score {means}; share passing: "
        + ", ".join(parts)
    )


def _split(row: dict[str, list[float]], detector: str) -> str:
    """'higher / tie / lower' shares of `detector`'s score, or a dash when the flaw names none
    of its instructions."""
    if f"{detector} higher" not in row:
        return "–"
    return " / ".join(f"{_mean(row[f'{detector} {w}']):.2f}" for w in ("higher", "tie", "lower"))


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def main() -> None:
    args = common.script_parser(__doc__).parse_args()
    sections = []
    for name, what in SETS.items():
        cases = load(name)
        scored = judge(cases)
        flawed = sum(len(c["flawed"]) for c in cases)
        sections.append(
            f"### {what}\n\n{len(cases)} questions, {flawed} flawed answers.\n\n"
            f"{pair_table(cases, scored)}\n\n{pass_table(cases, scored)}\n"
        )
    body = (
        "`python bench/rag_cases.py`: the shipped judge on hand-written support-bot cases "
        f'(short documents, short answers; {common.machine()}). "good higher" is the share of '
        "pairs where the correct answer scores strictly higher: a tie means the flaw moved no "
        "label. What the changes of 2026-12-05 did on each set (before → after) is in "
        "DEVELOPERS.md, \"Short answers and 'the documents don't say'\"; what reading only the "
        'documents in play did (2026-12-06), in "Documents in play".\n\n' + "\n".join(sections)
    )
    print(body)
    if not args.no_write:
        common.write_section("Hand-written RAG cases", body)


if __name__ == "__main__":
    main()
