"""Do the response's statements agree with the context, and with each other?

Sentence embeddings say two sentences are about the same thing; they barely notice a "not", a
changed number or a swapped name. So a pair of similar sentences is compared word by word, and a
conflict is a change *in the same place*:
- negation: one side negates a word that the other side states plainly;
- number, name: a number (or a capitalised name) stands where the other side has a different one,
  with the same content word beside it ("10 experience points" / "5 experience points");
- opposite: a word swapped for its opposite (more/less, before/after...) next to a shared word.
Requiring the shared neighbour keeps loose paraphrases, which differ everywhere, from counting.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from assay.judges.embedded import text as T
from assay.judges.embedded.encoder import Matrix

#: Pairs of sentences less similar than this are not compared.
CANDIDATE = 0.5
#: Context statements compared with each response sentence (the most similar ones).
PER_SENTENCE = 3
CONFLICT_KINDS = ("negation", "number", "name", "opposite")
#: How far from a changed word its shared neighbour may sit, in tokens, when a response
#: sentence is compared with the context ("opens at 9 am" / "opens at 11 am": opens). Two
#: sentences of one answer need a neighbour right next to it: an answer's parallel points
#: ("**Economic value**: The biome…", "**Ecological services**: The biome…") differ there.
NEAR = 2

_TOKEN = re.compile(r"[A-Za-z]+(?:'[a-z]+)?|\d+(?:[.,]\d+)*")
#: A currency named by a sign or code before a figure ("$15", "EUR 15") or a word after it
#: ("15 euros"): a price is compared with its currency, so "12 euros" is not the "under 12" of
#: an age limit (see `_present`).
_CURRENCY_BEFORE = re.compile(r"(?:([$€£¥₹])|\b(USD|EUR|GBP|JPY|INR|CHF)\s?)$", re.I)
_CURRENCY_AFTER = re.compile(
    r"\s?(?:([€£$¥₹])|(euros?|eur|dollars?|usd|pounds?|gbp|yen|jpy|rupees?|inr|francs?|chf)\b)",
    re.I,
)
_CURRENCY = {
    "$": "usd", "dollar": "usd", "€": "eur", "euro": "eur", "£": "gbp", "pound": "gbp",
    "¥": "jpy", "yen": "jpy", "₹": "inr", "rupee": "inr", "franc": "chf",
}  # fmt: skip
_STARTERS = frozenset(".:!?*\"'(#>-•")
_NEGATORS = frozenset(
    "not never cannot can't won't isn't aren't doesn't don't didn't wasn't weren't hasn't "
    "haven't hadn't shouldn't couldn't wouldn't mustn't".split()
)
#: How far after a negation its predicate may sit, in tokens.
SCOPE = 4
#: Words skipped when looking for what a negation applies to.
_HEDGES = frozenset(
    "necessarily always really actually currently directly yet even later still also longer "
    "typically usually generally immediately often simply fully entirely".split()
)


@dataclass(frozen=True)
class Conflict:
    kind: str
    strength: float  # similarity of the two sentences
    first: str  # the context statement, or the earlier response sentence
    second: str  # the response sentence


def _currency(text: str, start: int, end: int) -> str:
    """The currency of the figure at text[start:end] ("usd", "eur", ...), or ""."""
    found = _CURRENCY_BEFORE.search(text[max(0, start - 4) : start]) or _CURRENCY_AFTER.match(
        text, end
    )
    if found is None:
        return ""
    word = (found.group(1) or found.group(2)).lower()
    word = word[:-1] if word.endswith("s") and len(word) > 3 else word
    return _CURRENCY.get(word, word)


@dataclass(frozen=True)
class _Tokens:
    low: tuple[str, ...]
    #: Indices of capitalised words that do not start a sentence, a heading or a list item.
    names: frozenset[int]
    #: Each token's currency, for a price ("" for every other token).
    units: tuple[str, ...]

    @staticmethod
    @lru_cache(maxsize=4096)
    def of(sentence: str) -> _Tokens:
        low: list[str] = []
        names: set[int] = set()
        units: list[str] = []
        sentence = T.with_digits(sentence)
        for m in _TOKEN.finditer(sentence):
            units.append(_currency(sentence, m.start(), m.end()) if m.group(0)[0].isdigit() else "")
            before = sentence[: m.start()].rstrip()
            month = T.month_number(
                m.group(0),
                sentence[max(0, m.start() - 4) : m.start()],
                sentence[m.end() : m.end() + 4],
            )
            if m.group(0)[0].isupper() and before and before[-1] not in _STARTERS and not month:
                names.add(len(low))
                low.append(_name(m.group(0)))
                continue
            low.append(month or _word(m.group(0), sentence[m.end() : m.end() + 12]))
        return _Tokens(tuple(low), frozenset(names), tuple(units))

    def neighbours(self, k: int, near: int = 1) -> set[str]:
        """The nearest content word before and after position k, at most `near` tokens away: a
        stop word or a short unit in between is passed over ("opens at 9 am": opens)."""
        out = set()
        for step in (-1, 1):
            for i in range(k + step, k + step * (near + 1), step):
                if not 0 <= i < len(self.low):
                    break
                if self.low[i] not in T.STOPWORDS and len(self.low[i]) > 2:
                    out.add(self.low[i])
                    break
        return out

    def negations(self) -> list[tuple[int, int]]:
        """(negator index, predicate index): the first content word a negation applies to."""
        out = []
        for k, token in enumerate(self.low):
            if token in _NEGATORS:
                for m in range(k + 1, min(k + 1 + SCOPE, len(self.low))):
                    if self.low[m] not in T.STOPWORDS and self.low[m] not in _HEDGES:
                        out.append((k, m))
                        break
        return out


def _kind_of(tokens: _Tokens, k: int) -> str | None:
    token = tokens.low[k]
    if token[0].isdigit():
        return "number"
    if k in tokens.names:
        return "name"
    if token in T.OPPOSITES:
        return "opposite"
    return None


def _present(x: _Tokens, k: int, other: _Tokens) -> bool:
    """Whether token k of `x` is in `other`. A price is there only in the same currency, while a
    figure without one is there in any ("15" restates "15 euros"; "12 euros" does not restate
    "under 12")."""
    token, unit = x.low[k], x.units[k]
    if not unit:
        return token in other.low
    return any(t == token and u == unit for t, u in zip(other.low, other.units, strict=True))


def _known_figure(x: _Tokens, k: int, known: frozenset[str]) -> bool:
    """Whether the figure at token k of `x` is one the context states (`known_words`): a price
    in a currency the context prices in must be one of its prices in that currency."""
    token, unit = x.low[k], x.units[k]
    if unit and f"|{unit}" in known:
        return f"{token}|{unit}" in known or f"{token}|*" in known
    return token in known


def _substitutions(a: _Tokens, b: _Tokens, known: frozenset[str], near: int) -> set[str]:
    """Kinds of same-place substitutions from `a` to `b`: a number, name or opposite in `b`
    that `a` lacks, next to a word that sits next to a different token of that kind in `a`."""
    found: set[str] = set()
    slots: dict[str, list[tuple[str, set[str]]]] = {}
    for k, token in enumerate(a.low):
        kind = _kind_of(a, k)
        if kind and not _present(a, k, b):
            slots.setdefault(kind, []).append((token, a.neighbours(k, near)))
    says_more = _says_more(a, b, known)
    for k, token in enumerate(b.low):
        kind = _kind_of(b, k)
        if kind is None or _present(b, k, a) or kind not in slots:
            continue
        if kind != "opposite" and _known_figure(b, k, known) and says_more:
            # Stated elsewhere in the reference, and `b` may join two statements. A restatement
            # whose only new words are the reference's names or numbers is a substitution even
            # so ("The use of Semantic demonstrates…" against "The use of SMW demonstrates…",
            # where the context names Semantic elsewhere).
            continue
        around = b.neighbours(k, near)
        for other, other_near in slots[kind]:
            if kind == "opposite" and (
                T.OPPOSITES.get(token) != other or _negated_opposite(a, other, b, token)
            ):
                continue
            if around & other_near:
                found.add(kind)
    return found


def _says_more(a: _Tokens, b: _Tokens, known: frozenset[str]) -> bool:
    """Whether `b` says something `a` does not say in any form (five-letter stems, as
    `text.word_stems`), besides names and numbers the reference states and a number's unit
    ("2 days"): then `b` may join `a` to another statement."""
    stems_a = {t[:5] for t in a.low}
    return any(
        t[:5] not in stems_a
        and t not in T.STOPWORDS
        and not (t in known and _kind_of(b, k) in ("name", "number"))
        and not (k > 0 and b.low[k - 1][0].isdigit())
        for k, t in enumerate(b.low)
    )


def _negated_opposite(a: _Tokens, word: str, b: _Tokens, opposite: str) -> bool:
    """Whether one side negates its word and the other states the opposite plainly: "does not
    open" and "is closed", "not required" and "optional" say the same thing."""
    polarity = (_polarities(a, word), _polarities(b, opposite))
    return polarity in (({True}, {False}), ({False}, {True}))


def _explained_negations(x: _Tokens, y: _Tokens) -> int:
    """How many of `x`'s negations apply to a word whose opposite `y` states plainly."""
    return sum(
        False in _polarities(y, T.OPPOSITES.get(x.low[predicate], ""))
        for _, predicate in x.negations()
    )


def _negation_flip(a: _Tokens, b: _Tokens) -> bool:
    """One side negates a word that the other side states plainly, in the same place: the word
    before the negation on one side is the word before the predicate on the other
    ("was not developed" / "was developed"), or the predicates are followed by the same word."""
    for x, y in ((a, b), (b, a)):
        for negator, predicate in x.negations():
            word = x.low[predicate]
            if False in _polarities(x, word) or True in _polarities(y, word):
                # One side says it both ways ("Service animals are welcome, but pets that are
                # not service animals…"), or both negate it: no flip on this word.
                continue
            for m, token in enumerate(y.low):
                if token != word or _NEGATORS & set(y.low[max(0, m - SCOPE) : m]):
                    continue
                before = x.low[negator - 1] if negator > 0 else None
                after = x.low[predicate + 1] if predicate + 1 < len(x.low) else None
                y_before = y.low[m - 1] if m > 0 else None
                y_after = y.low[m + 1] if m + 1 < len(y.low) else None
                if (before and before == y_before) or (after and after == y_after):
                    return True
    return False


def _polarities(t: _Tokens, word: str) -> set[bool]:
    """How `t` uses `word`: True for a use with a negation before it, False for a plain one."""
    return {
        bool(_NEGATORS & set(t.low[max(0, m - SCOPE) : m]))
        for m, token in enumerate(t.low)
        if token == word
    }


def may_conflict(
    a: str,
    b: str,
    directed: bool = False,
    settled: frozenset[str] = frozenset(),
    known: frozenset[str] = frozenset(),
) -> bool:
    """Whether two sentences differ where a contradiction can live: a negation on one side only,
    or a number, name or opposite word that the other side lacks. A pair that differs in none of
    these (a paraphrase, a shortened copy) is not read as a contradiction, whatever a model says:
    the agreement model, trained on edited copies, takes any rewording for an edit.

    directed: `a` is a context statement and `b` a response sentence, and only a number or name
    of `b` that `a` lacks counts: a sentence that states less than its statement ("DVDs are
    loaned for 1 week." of "Books are loaned for 3 weeks and DVDs for 1 week.") changes nothing.
    settled: with `directed`, figures of `b` that open nothing either (see `arithmetic`).
    known: with `directed`, `known_words` of the context: in a sentence that says more than its
    statement (it may join two), a figure the context states elsewhere is settled too. A name
    is not: a name swapped for another of the context's is the commoner edit."""
    ta, tb = _Tokens.of(a), _Tokens.of(b)
    words_a, words_b = set(ta.low), set(tb.low)
    # A negation on one side only, unless it negates a word whose opposite the other side
    # states ("does not open" / "is closed").
    unexplained = [
        sum(token in _NEGATORS for token in t.low) - _explained_negations(t, u)
        for t, u in ((ta, tb), (tb, ta))
    ]
    if bool(_NEGATORS & words_a) != bool(_NEGATORS & words_b) and any(unexplained):
        return True
    # A sentence that says more than its statement may join it to another: then a figure the
    # context states elsewhere is settled too.
    joins = bool(directed and known and _says_more(ta, tb, known))
    for x, y, mine, other in ((ta, tb, words_a, words_b), (tb, ta, words_b, words_a)):
        for k, token in enumerate(x.low):
            kind = _kind_of(x, k)
            if kind == "opposite":
                partner = T.OPPOSITES.get(token)
                # Both sides using both words ("opens at 9 and closes at 6") swap nothing.
                both = token in other and partner in mine
                if partner in other and not both and not _negated_opposite(x, token, y, partner):
                    return True
            elif kind and not _present(x, k, y) and not (directed and x is ta):
                if (
                    directed
                    and kind == "number"
                    and (token in settled or (joins and _known_figure(x, k, known)))
                ):
                    continue
                return True
    return False


def _pair_conflicts(
    a: str, b: str, similarity: float, known: frozenset[str], near: int = 1
) -> list[Conflict]:
    ta, tb = _Tokens.of(a), _Tokens.of(b)
    kinds = _substitutions(ta, tb, known, near)
    if _negation_flip(ta, tb):
        kinds.add("negation")
    return [Conflict(kind, similarity, a, b) for kind in sorted(kinds)]


#: Words that join a copied statement to what comes before it.
_JOINERS = frozenset("and but so also yes no however while whereas".split())


def _in_order(short: tuple[str, ...], long: tuple[str, ...]) -> bool:
    """Whether every token of `short` appears in `long`, in the same order (gaps allowed)."""
    rest = iter(long)
    return all(token in rest for token in short)


def stated_sentences(
    statements: Sequence[str], sentences: Sequence[str], similarity: Matrix
) -> frozenset[str]:
    """Response sentences that a context statement states: all their words are the statement's,
    in its order, with the same negations (a copy, or a shortened one, perhaps after a joining
    word such as "but"). Such a sentence cannot contradict the context; where it seems to, two
    statements of the context differ ("The Paris office opens early." / "The London office opens
    late.").

    similarity: statements × sentences; the PER_SENTENCE closest statements are tried.
    """
    found = set()
    for j, sentence in enumerate(sentences):
        mine = _Tokens.of(sentence).low
        while mine and mine[0] in _JOINERS:  # "but pets are not allowed" copies "Pets are not..."
            mine = mine[1:]
        negations = _NEGATORS & set(mine)
        for i in np.argsort(-similarity[:, j])[:PER_SENTENCE]:
            theirs = _Tokens.of(statements[i]).low
            if negations == _NEGATORS & set(theirs) and _in_order(mine, theirs):
                found.add(sentence)
                break
    return frozenset(found)


def known_words(context_text: str, figures: Iterable[str] = ()) -> frozenset[str]:
    """Every word and number of the context (lower-cased), not through `_Tokens.of`: a context
    can be long, and neither its name positions nor a cache entry of it are needed. A duration
    is known in its one unit and as written ("24 hours": 1 and 24).

    figures: more figures to count as known in any currency (those the query gives, and those an
    answer works out from the given ones)."""
    text = T.with_digits(context_text)
    matches = list(_TOKEN.finditer(text))
    tokens = [m.group(0) for m in matches]
    names = {_name(token) for token in tokens if token[0].isupper()}
    # Each price also with its currency, and each currency as "|eur": see `_known_figure`.
    prices = set()
    for m in matches:
        unit = _currency(text, m.start(), m.end()) if m.group(0)[0].isdigit() else ""
        if unit:
            prices |= {f"{_word(m.group(0))}|{unit}", f"|{unit}"}
    prices |= {f"{figure}|*" for figure in figures}
    return frozenset(
        {_word(token) for token in tokens} | names | T.numbers(context_text) | prices | set(figures)
    )


def _name(token: str) -> str:
    """A name as compared: lower-cased, without a possessive or plural "s" ("Nazi's" and
    "Nazis" are "nazi")."""
    low = token.lower().removesuffix("'s")
    return low[:-1] if len(low) > 3 and low.endswith("s") and not low.endswith("ss") else low


def _word(token: str, after: str = "") -> str:
    """A token as compared: lower-cased, a number in one spelling ("1,200" is "1200") and a
    duration in one unit ("2 weeks" is "14 days"): `text.quantity`."""
    return T.quantity(token, after) if token[0].isdigit() else token.lower()


def context_conflicts(
    statements: Sequence[str],
    sentences: Sequence[str],
    similarity: Matrix,
    known: frozenset[str],
    stated: frozenset[str] = frozenset(),
) -> list[Conflict]:
    """Conflicts between response sentences and the context statements they restate.

    similarity: statements × sentences cosine similarities; known: `known_words` of the context
    (a name or number it states anywhere is no substitution); stated: `stated_sentences`, which
    are not compared.
    """
    if not statements or not sentences:
        return []
    found: list[Conflict] = []
    for j, sentence in enumerate(sentences):
        if sentence in stated:
            continue
        for i in np.argsort(-similarity[:, j])[:PER_SENTENCE]:
            if similarity[i, j] < CANDIDATE:
                break
            found += _pair_conflicts(statements[i], sentence, float(similarity[i, j]), known, NEAR)
    return sorted(found, key=lambda c: -c.strength)


def self_conflicts(
    sentences: Sequence[str],
    similarity: Matrix,
    known: frozenset[str] = frozenset(),
    stated: frozenset[str] = frozenset(),
    remarks: frozenset[str] = frozenset(),
) -> list[Conflict]:
    """Conflicts between two sentences of the response (identical repeats are not conflicts, nor
    two sentences the context states: `stated_sentences`, nor a pair with a remark on what the
    sources do not say: `text.source_remark`).

    similarity: sentences × sentences cosine similarities; known: `known_words` of the context.
    A number the context states is not a substitution ("returns within 30 days" and "refunds
    within 5 days" restate two facts); names are, since an answer's own names are the context's.
    """
    known = frozenset(word for word in known if word[0].isdigit())
    found: list[Conflict] = []
    for j in range(len(sentences)):
        for k in range(j + 1, len(sentences)):
            if (
                similarity[j, k] >= CANDIDATE
                and sentences[j] != sentences[k]
                and not {sentences[j], sentences[k]} <= stated
                and not {sentences[j], sentences[k]} & remarks
            ):
                found += _pair_conflicts(sentences[j], sentences[k], float(similarity[j, k]), known)
    return sorted(found, key=lambda c: -c.strength)


def weight(conflicts: Sequence[Conflict], kind: str | None = None) -> float:
    """Sum over response sentences of their strongest conflict (of `kind`), capped at 2: every
    further conflicting sentence counts, a well-aligned one more than a loose one."""
    best: dict[str, float] = {}
    for c in conflicts:
        if kind is None or c.kind == kind:
            best[c.second] = max(best.get(c.second, 0.0), c.strength)
    return min(sum(best.values()), 2.0)
