"""Damaged copies of good answers, for the judgment sanity suite and the calibration fit.

Each kind of damage is something an instruction names (a tangent, an omission, a contradiction,
a broken structure...). A kind has several rules and applies one at random, at random positions,
so the judge cannot learn one fixed edit. A rule returns None when it does not apply to an
answer (no number to change, too few sentences...); the kind then tries its other rules.

Good and damaged answers are both rebuilt from the same sentence split, so a pair differs only by
the damage, never by formatting.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from assay.judges.embedded.text import content_words, split_sentences


@dataclass(frozen=True)
class Source:
    """What a rule may draw on besides the answer itself."""

    query: str
    context: tuple[str, ...]
    unrelated: Sequence[str]  # answers to questions from other topics
    similar: Sequence[str]  # answers to the most similar other questions, nearest first


Rule = Callable[[list[str], Source, random.Random], list[str] | None]


def normalised(text: str) -> str:
    """The answer as the damage sees it: its sentences joined by single spaces."""
    return " ".join(split_sentences(text))


def _insert(sentences: list[str], extra: list[str], rng: random.Random) -> list[str]:
    at = rng.randint(1, len(sentences)) if len(sentences) > 1 else 1
    return sentences[:at] + extra + sentences[at:]


def _other_sentences(answers: Sequence[str], rng: random.Random, count: int) -> list[str] | None:
    for answer in rng.sample(list(answers), min(len(answers), 5)):
        pieces = [s for s in split_sentences(answer) if len(s.split()) >= 6]
        if len(pieces) >= count:
            start = rng.randrange(len(pieces) - count + 1)
            return pieces[start : start + count]
    return None


# --- tangent: sentences from an answer to an unrelated question -------------------------------


def tangent_one(s: list[str], src: Source, rng: random.Random) -> list[str] | None:
    extra = _other_sentences(src.unrelated, rng, 1)
    return _insert(s, extra, rng) if extra else None


def tangent_two(s: list[str], src: Source, rng: random.Random) -> list[str] | None:
    extra = _other_sentences(src.unrelated, rng, 2)
    return _insert(s, extra, rng) if extra else None


def tangent_scattered(s: list[str], src: Source, rng: random.Random) -> list[str] | None:
    extra = _other_sentences(src.unrelated, rng, 2)
    if not extra or len(s) < 2:
        return None
    return _insert(_insert(s, extra[:1], rng), extra[1:], rng)


# --- the answer to a different but similar question ---------------------------------------------


def other_nearest(s: list[str], src: Source, rng: random.Random) -> list[str] | None:
    return split_sentences(src.similar[0]) if src.similar else None


def other_near(s: list[str], src: Source, rng: random.Random) -> list[str] | None:
    if len(src.similar) < 3:
        return None
    return split_sentences(src.similar[rng.randint(1, 2)])


# --- an answer about something else entirely ---------------------------------------------------


def unrelated_whole(s: list[str], src: Source, rng: random.Random) -> list[str] | None:
    return split_sentences(rng.choice(list(src.unrelated))) if src.unrelated else None


def unrelated_short(s: list[str], src: Source, rng: random.Random) -> list[str] | None:
    """One or two sentences about something else (a short, confident, off-topic answer)."""
    return _other_sentences(src.unrelated, rng, rng.choice([1, 2]))


# --- omission of context statements -------------------------------------------------------------


def _overlap(sentence: str, context: Sequence[str]) -> float:
    words = content_words(sentence)
    ctx = content_words(" ".join(context))
    return len(words & ctx) / max(len(words), 1)


def cut_first_third(s: list[str], src: Source, rng: random.Random) -> list[str] | None:
    if len(s) < 3:
        return None
    return s[: max(1, len(s) // 3)]


def drop_best_covered(s: list[str], src: Source, rng: random.Random) -> list[str] | None:
    """Remove the half of the sentences that share most words with the context."""
    if len(s) < 2 or not src.context:
        return None
    ranked = sorted(range(len(s)), key=lambda i: -_overlap(s[i], src.context))
    gone = set(ranked[: (len(s) + 1) // 2])
    return [x for i, x in enumerate(s) if i not in gone]


def drop_random_half(s: list[str], src: Source, rng: random.Random) -> list[str] | None:
    if len(s) < 3:
        return None
    keep = sorted(rng.sample(range(len(s)), len(s) // 2))
    return [s[i] for i in keep]


# --- omission of query aspects --------------------------------------------------------------------


def _query_questions(query: str) -> list[str]:
    return [q for q in split_sentences(query) if q.rstrip().endswith("?") and content_words(q)]


def drop_one_aspect(s: list[str], src: Source, rng: random.Random) -> list[str] | None:
    """Remove the sentences that share more words with one of the query's questions than with
    the others (the part of the answer that addresses that question)."""
    questions = _query_questions(src.query)
    if len(questions) < 2 or len(s) < 2:
        return None
    target = rng.randrange(len(questions))
    words = [content_words(q) for q in questions]

    def about_target(sentence: str) -> bool:
        mine = content_words(sentence)
        hits = [len(mine & w) for w in words]
        return hits[target] > 0 and hits[target] >= max(hits)

    kept = [x for x in s if not about_target(x)]
    return kept if 0 < len(kept) < len(s) else None


# --- contradiction of a statement -----------------------------------------------------------------

_AUX = re.compile(
    r"\b(is|are|was|were|can|could|will|would|should|does|do|did|has|have|had|must|may|might)\b"
)
_NEGATED = re.compile(
    r"\b(?:(is|are|was|were|does|do|did|has|have|had|could|would|should|must)"
    r"(?: not|n't)|cannot|can't|won't|never)\b",
    re.I,
)
_UNNEGATE = {"cannot": "can", "can't": "can", "won't": "will", "never": "always"}
_NUMBER = re.compile(r"(?<![\w.,])\d+(?:[.,]\d+)?(?![\w])")
ANTONYMS = {
    "more": "less",
    "higher": "lower",
    "increase": "decrease",
    "increases": "decreases",
    "increased": "decreased",
    "larger": "smaller",
    "bigger": "smaller",
    "before": "after",
    "above": "below",
    "faster": "slower",
    "better": "worse",
    "most": "least",
    "always": "never",
    "maximum": "minimum",
    "first": "last",
    "positive": "negative",
    "earlier": "later",
    "older": "younger",
    "longer": "shorter",
    "cheaper": "costlier",
    "rise": "fall",
    "rises": "falls",
    "gain": "loss",
    "allow": "prohibit",
    "allows": "prohibits",
    "include": "exclude",
    "includes": "excludes",
    "accept": "reject",
    "strong": "weak",
    "stronger": "weaker",
    "high": "low",
    "easy": "difficult",
    "easier": "harder",
    "many": "few",
    "large": "small",
    "early": "late",
    "inside": "outside",
    "same": "different",
    "similar": "different",
    "advantage": "disadvantage",
    "benefits": "harms",
    "improves": "worsens",
    "improve": "worsen",
    "reduce": "raise",
    "reduces": "raises",
}
ANTONYMS.update({v: k for k, v in list(ANTONYMS.items()) if v not in ANTONYMS})


def _match_case(word: str, like: str) -> str:
    return word.capitalize() if like[:1].isupper() else word


# A present-tense verb after its subject ("the museum opens", "it carries"), for negation.
_VERB = re.compile(
    r"\b(?:it|he|she|this|that|which|who|[a-z]+(?:er|or|ion|ity|ment|ness|um|ue|ee|al))"
    r" ([a-z]{3,}(?:es|s))\b",
    re.I,
)
_NOT_VERBS = frozenset("is was has does goes always also thus less process its this us".split())


def _base_form(verb: str) -> str:
    if verb.endswith("ies"):
        return verb[:-3] + "y"
    if verb.endswith(("ches", "shes", "sses", "xes", "zes")):
        return verb[:-2]
    return verb[:-1]


def negate(sentence: str, rng: random.Random) -> str | None:
    """The sentence with its negation removed, or a negation added (after an auxiliary, or as
    "does not" / "never" / "no longer" before a present-tense verb)."""
    negated = _NEGATED.search(sentence)
    if negated:  # remove the negation
        token = negated.group(0)
        plain = _UNNEGATE.get(token.lower()) or negated.group(1)
        return sentence[: negated.start()] + _match_case(plain, token) + sentence[negated.end() :]
    aux = _AUX.search(sentence)
    verb = next((m for m in _VERB.finditer(sentence) if m.group(1).lower() not in _NOT_VERBS), None)
    if verb and (aux is None or rng.random() < 0.5):
        word = verb.group(1)
        negative = rng.choice(
            [f"does not {_base_form(word)}", f"never {word}", f"no longer {word}"]
        )
        return sentence[: verb.start(1)] + negative + sentence[verb.end(1) :]
    if aux:
        return (
            sentence[: aux.end()] + rng.choice([" not", " not", " never"]) + sentence[aux.end() :]
        )
    return None


def change_number(sentence: str, rng: random.Random) -> str | None:
    found = list(_NUMBER.finditer(sentence))
    if not found:
        return None
    m = rng.choice(found)
    text = m.group(0).replace(",", "")
    value = float(text)
    if 1000 <= value <= 2100 and "." not in text:  # a year
        new = str(int(value) + rng.choice([-1, 1]) * rng.randint(3, 40))
    elif value == int(value):
        choices = [int(value) * 2, int(value) + rng.randint(1, 9), max(int(value) * 3 // 2 + 1, 2)]
        if value > 2:
            choices.append(int(value) // 2)
        new = str(rng.choice([c for c in choices if c != int(value)]))
    else:
        new = f"{value * rng.choice([0.5, 1.5, 2.0, 3.0]):.{len(text.split('.')[1])}f}"
    return sentence[: m.start()] + new + sentence[m.end() :]


_WORD = re.compile(r"[^\W\d_][\w'-]*")


def _capitalised_runs(text: str) -> list[tuple[int, int, str]]:
    """(start, end, text) of runs of capitalised words (any alphabet), not at a sentence start."""
    runs: list[tuple[int, int, str]] = []
    for m in _WORD.finditer(text):
        before = text[: m.start()].rstrip()
        if not m.group(0)[0].isupper() or not before or before[-1] in ".!?:":
            continue
        if runs and text[runs[-1][1] : m.start()] == " ":
            start = runs[-1][0]
            runs[-1] = (start, m.end(), text[start : m.end()])
        else:
            runs.append((m.start(), m.end(), m.group(0)))
    return [r for r in runs if len(r[2]) > 2]


def swap_entity(sentence: str, rng: random.Random, pool: Sequence[str] = ()) -> str | None:
    """Put another name in the place of one of the sentence's names (or swap two of them)."""
    mine = _capitalised_runs(sentence)
    if not mine:
        return None
    names = {r[2] for r in mine}
    if len(names) >= 2 and rng.random() < 0.5:
        a, b = rng.sample(sorted(names), 2)
        return re.sub(
            rf"\b({re.escape(a)}|{re.escape(b)})\b", lambda m: b if m.group(0) == a else a, sentence
        )
    others = sorted({r[2] for text in pool for r in _capitalised_runs(text)} - names)
    others = [o for o in others if o.lower() not in sentence.lower()]
    if not others:
        return None
    start, end, _ = rng.choice(mine)
    return sentence[:start] + rng.choice(others) + sentence[end:]


def reverse_comparison(sentence: str, rng: random.Random) -> str | None:
    hits = [m for m in re.finditer(r"\b[A-Za-z]+\b", sentence) if m.group(0).lower() in ANTONYMS]
    if not hits:
        return None
    m = rng.choice(hits)
    word = _match_case(ANTONYMS[m.group(0).lower()], m.group(0))
    return sentence[: m.start()] + word + sentence[m.end() :]


Edit = Callable[[str, random.Random, Sequence[str]], str | None]
EDITS: dict[str, Edit] = {
    "negation": lambda s, rng, pool: negate(s, rng),
    "number": lambda s, rng, pool: change_number(s, rng),
    "name": swap_entity,
    "opposite": lambda s, rng, pool: reverse_comparison(s, rng),
}


def _restated(sentence: str, context: Sequence[str]) -> tuple[float, set[str]]:
    """How fully `sentence` restates its closest context statement, and that statement's words."""
    best, words = 0.0, set()
    mine = content_words(sentence)
    for statement in (x for doc in context for x in split_sentences(doc)):
        theirs = content_words(statement)
        score = len(mine & theirs) / max(min(len(mine), len(theirs)), 1)
        if score > best:
            best, words = score, set(re.findall(r"[a-z0-9]+", statement.lower()))
    return best, words


def _against_context(edit: str) -> Rule:
    def rule(s: list[str], src: Source, rng: random.Random) -> list[str] | None:
        """Edit a sentence that restates a context statement so that it says something else
        about a word that statement contains (a contradiction of the context by construction)."""
        restated = [(_restated(x, src.context), i) for i, x in enumerate(s)]
        for (score, words), i in sorted(restated, key=lambda t: -t[0][0])[:4]:
            if score < 0.6:
                break
            changed = EDITS[edit](s[i], rng, src.context)
            if not changed or changed == s[i]:
                continue
            old = re.findall(r"[a-z0-9]+", s[i].lower())
            new = re.findall(r"[a-z0-9]+", changed.lower())
            touched = set(old) ^ set(new)
            if edit == "negation":  # the negated or un-negated word must be the statement's
                at = next(
                    (k for k, (x, y) in enumerate(zip(old, new, strict=False)) if x != y), len(old)
                )
                touched = set(old[at : at + 3]) | set(new[at : at + 3])
            if touched & words:
                return s[:i] + [changed] + s[i + 1 :]
        return None

    rule.__name__ = f"context_{edit}"
    return rule


def _against_itself(edit: str) -> Rule:
    def rule(s: list[str], src: Source, rng: random.Random) -> list[str] | None:
        """Add, away from it, a sentence that contradicts one of the answer's own sentences."""
        if len(s) < 2:
            return None
        for i in rng.sample(range(len(s)), len(s)):
            changed = EDITS[edit](s[i], rng, s)
            if not changed or changed == s[i]:
                continue
            far = [j for j in range(len(s) + 1) if abs(j - i) > 1 and j != i + 1] or [len(s)]
            at = rng.choice(far)
            return s[:at] + [changed] + s[at:]
        return None

    rule.__name__ = f"itself_{edit}"
    return rule


# --- structure ------------------------------------------------------------------------------------


def _shuffled(s: list[str], rng: random.Random) -> list[str]:
    order = list(range(len(s)))
    while order == sorted(order):
        rng.shuffle(order)
    return [s[i] for i in order]


def shuffle_and_repeat(s: list[str], src: Source, rng: random.Random) -> list[str] | None:
    if len(s) < 3:
        return None
    out = _shuffled(s, rng)
    return _insert(out, [rng.choice(s)], rng)


def shuffle_only(s: list[str], src: Source, rng: random.Random) -> list[str] | None:
    return _shuffled(s, rng) if len(s) >= 4 else None


def repeat_two(s: list[str], src: Source, rng: random.Random) -> list[str] | None:
    if len(s) < 2:
        return None
    out = list(s)
    for sentence in rng.sample(s, 2):
        out = _insert(out, [sentence], rng)
    return out


def run_together(s: list[str], src: Source, rng: random.Random) -> list[str] | None:
    """Join the sentences into one run-on sentence (ends and capitals removed)."""
    if len(s) < 3:
        return None
    glue = rng.choice([" ", " and ", ", "])
    parts = [p.rstrip(".!?") for p in s]
    parts = [parts[0]] + [p[:1].lower() + p[1:] for p in parts[1:]]
    return [glue.join(parts) + "."]


def repetition_loop(s: list[str], src: Source, rng: random.Random) -> list[str] | None:
    """A degenerate loop: a few words of the answer repeated over and over, as a stuck decoder
    writes them ("the the the", "I think I think I think")."""
    words = rng.choice(s).split()
    if len(words) < 3:
        return None
    size = rng.randint(1, 3)
    start = rng.randrange(len(words) - size + 1)
    phrase = " ".join(words[start : start + size]).strip(".,;:!?")
    loop = " ".join([phrase] * rng.randint(6, 12))
    return _insert(s, [loop[:1].upper() + loop[1:] + "."], rng)


# --- explanations stripped --------------------------------------------------------------------------

_EXPLANATORY_CLAUSE = re.compile(
    r"[,;:]?\s*(?:\(|\b)(?:because|since|so that|which means|this means|for example|for instance|"
    r"such as|e\.g\.|i\.e\.|due to|as a result|in other words|that is why|like)\b.*$",
    re.I,
)
_EXPLANATORY_SENTENCE = re.compile(
    r"^(?:for example|for instance|this is because|that's why|this means|imagine|think of|"
    r"in other words|e\.g\.|as a result|this is why)\b",
    re.I,
)


_ASKS_WHY = re.compile(
    r"\b(?:why|how(?! (?:many|much|long|often|old|far|soon|big|tall|early|late)\b)|explain\w*)\b",
    re.I,
)


def strip_explanations(s: list[str], src: Source, rng: random.Random) -> list[str] | None:
    """Drop explanatory sentences and cut explanatory clauses, leaving the bare claims. Only
    for questions that ask why or how: elsewhere an explanation may not be needed at all."""
    if not _ASKS_WHY.search(src.query):
        return None
    out: list[str] = []
    changed = False
    for sentence in s:
        if _EXPLANATORY_SENTENCE.match(sentence):
            changed = True
            continue
        cut = _EXPLANATORY_CLAUSE.sub("", sentence).rstrip(" ,;:")
        if cut != sentence:
            changed = True
            if len(cut.split()) < 3:
                continue
            cut += "."
        out.append(cut)
    return out if changed and out else None


# --- content the context does not support ----------------------------------------------------------


def add_unsupported(s: list[str], src: Source, rng: random.Random) -> list[str] | None:
    """Insert sentences from the answer to a similar question (on topic, not in the context)."""
    ctx = content_words(" ".join(src.context))
    for answer in src.similar[:3]:
        pieces = [
            p
            for p in split_sentences(answer)
            if len(p.split()) >= 6 and len(content_words(p) & ctx) <= len(content_words(p)) // 3
        ]
        if pieces:
            count = min(len(pieces), rng.choice([1, 2]))
            start = rng.randrange(len(pieces) - count + 1)
            return _insert(s, pieces[start : start + count], rng)
    return None


@dataclass(frozen=True)
class Kind:
    name: str
    rules: tuple[Rule, ...]
    targets: dict[str, tuple[str, ...]]  # detector -> checks this damage must lower


KINDS: tuple[Kind, ...] = (
    Kind(
        "tangent",
        (tangent_one, tangent_two, tangent_scattered),
        {
            "output_relevance": ("prioritize_relevant", "no_tangents"),
            "completeness": ("accurate_and_focused",),
        },
    ),
    Kind(
        "other_question",
        (other_nearest, other_near),
        {
            "output_relevance": ("core_intent", "no_misinterpretation"),
            "completeness": ("query_aspects",),
        },
    ),
    Kind(
        "unrelated_answer",
        (unrelated_whole, unrelated_short),
        {
            "output_relevance": (
                "core_intent",
                "prioritize_relevant",
                "no_tangents",
                "no_misinterpretation",
            )
        },
    ),
    Kind(
        "context_omission",
        (cut_first_third, drop_best_covered, drop_random_half),
        {"completeness": ("key_information", "no_omissions")},
    ),
    Kind("aspect_omission", (drop_one_aspect,), {"completeness": ("query_aspects",)}),
    Kind(
        "context_contradiction",
        tuple(_against_context(edit) for edit in EDITS),
        {"completeness": ("faithful_interpretation", "no_contradiction")},
    ),
    Kind(
        "self_contradiction",
        tuple(_against_itself(edit) for edit in EDITS),
        {"completeness": ("no_contradiction",)},
    ),
    Kind(
        "structure",
        (shuffle_and_repeat, shuffle_only, repeat_two, run_together, repetition_loop),
        {"completeness": ("clear_structure",)},
    ),
    Kind(
        "explanation_stripped", (strip_explanations,), {"completeness": ("explains_when_needed",)}
    ),
    Kind("unsupported_content", (add_unsupported,), {"completeness": ("accurate_and_focused",)}),
)
KIND_BY_NAME = {k.name: k for k in KINDS}


def damage(kind: Kind, answer: str, src: Source, rng: random.Random) -> tuple[str, str] | None:
    """(rule name, damaged answer) or None when no rule of the kind applies."""
    sentences = split_sentences(answer)
    for rule in rng.sample(list(kind.rules), len(kind.rules)):
        out = rule(list(sentences), src, rng)
        if out and " ".join(out) != " ".join(sentences):
            return rule.__name__, " ".join(out)
    return None
