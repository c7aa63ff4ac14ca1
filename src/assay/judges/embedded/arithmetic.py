"""Figures an answer works out from the context's and the query's figures.

A support answer often adds up what the documents price ("£22 per tyre plus the £10 run-flat
surcharge, so £32 per tyre"). Its total is stated nowhere, so the word rules read it as a
changed number and the agreement model as a contradiction of each statement it draws on. A
sentence that says it computes ("in total", "plus", "comes to", "2 x $20") and whose figure
follows from the given figures in one or two steps is a computation, not a conflict.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from itertools import combinations

from assay.judges.embedded import text as T

#: Words and signs that say a sentence works a figure out.
_COMPUTES = re.compile(
    r"\b(?:in total|total(?:s|ling|ing)?|altogether|in all|all in|comes? to|came to|"
    r"coming to|adds? up to|add(?:ed|ing)? up to|sum|plus|minus|times|making|makes|"
    r"works? out|worked out|multiplied|divided|subtract(?:ed|ing)?)\b|[×=+]|\d\s*x\s*[$£€]?\d",
    re.IGNORECASE,
)
#: Most given figures combined three at a time (a context with more is combined in pairs only).
TRIPLE_LIMIT = 40
#: Two figures are the same if they differ by less than half a cent.
_TOLERANCE = 0.005


def computes(sentence: str) -> bool:
    """Whether `sentence` says it works a figure out."""
    return bool(_COMPUTES.search(sentence))


def worked_out(sentences: Iterable[str], given: set[str], query: str) -> set[str]:
    """The figures an answer's computing sentences work out, each from the figures the answer
    has shown so far (those of its sentences up to this one that the context or the query
    gives, and those it worked out before) and the query's: an answer shows its working, and
    only the figures it names can be its operands. Operands taken from the whole context would
    make almost any figure follow."""
    shown = T.numbers(query, plain=True)
    out: set[str] = set()
    for sentence in sentences:
        figures = T.numbers(sentence)
        shown |= figures & given
        if computes(sentence):
            # A figure worked out is an operand of the next ("so £32 per tyre, £128 for four").
            for _ in range(2):
                found = derived(figures - given - out, shown)
                out |= found
                shown |= found
    return out


def _value(figure: str) -> float | None:
    try:
        return float(figure)
    except ValueError:
        return None


def derived(figures: Iterable[str], given: Iterable[str]) -> set[str]:
    """Those of `figures` that follow from the `given` figures in at most two steps: a sum,
    difference, product or quotient of two (a product also per hundred, for pence and cents),
    a sum of three, or one figure plus the product of two others ("$30 plus 2 x $20")."""
    values = sorted({v for v in map(_value, given) if v is not None and v > 0})
    known = {round(v, 2) for v in values}
    found = set()
    for figure in figures:
        target = _value(figure)
        if target is None or target <= 0 or round(target, 2) in known:
            continue
        if _follows(target, values, known):
            found.add(figure)
    return found


def _near(a: float, b: float) -> bool:
    return abs(a - b) < _TOLERANCE


def _follows(target: float, values: list[float], known: set[float]) -> bool:
    for a, b in combinations(values, 2):
        if any(_near(target, x) for x in (a + b, b - a, a * b, a * b / 100)):
            return True
        if a != 1 and _near(target, b / a):
            return True
    if len(values) > TRIPLE_LIMIT:
        return False
    for a, b in combinations(values, 2):
        # a third figure plus the sum or the product of these two ("$30 plus 2 x $20")
        for rest in (target - a - b, target - a * b):
            if round(rest, 2) in known and not _near(rest, a) and not _near(rest, b):
                return True
    return False
