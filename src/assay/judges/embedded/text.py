"""Plain-text helpers for the embedded judge: sentences, content words, numbers, structure."""

from __future__ import annotations

import re

# A sentence ends at . ! or ? followed by space and an upper-case letter, digit, quote or bracket,
# or at a line break. Abbreviations like "e.g." are protected first so they do not split.
_ABBREVIATIONS = re.compile(r"\b(e\.g|i\.e|etc|vs|Mr|Mrs|Dr|St|No|approx|incl|Fig)\.", re.I)
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9])")
_LIST_MARKER = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+")
_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
_NUMBER = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)*%?")
_NEGATION = re.compile(
    r"\b(?:not|no|never|none|cannot|can't|won't|isn't|aren't|doesn't|don't|didn't|wasn't|weren't|without)\b",
    re.I,
)
_EXPLANATION_MARKERS = re.compile(
    r"\b(?:because|for example|for instance|such as|e\.g\.|i\.e\.|that is|which means|"
    r"this means|so that|in other words|like|imagine|think of|since|therefore|thus)\b",
    re.I,
)

STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for from
    further had has have having he her here hers herself him himself his how i if in into is it
    its itself just me more most my myself no nor not now of off on once only or other our ours
    out over own same she should so some such than that the their theirs them then there these
    they this those through to too under until up very was we were what when where which while
    who whom why will with would you your yours yourself explain tell describe please whats does
    get got make made much many way ways thing things really also one""".split()
)

#: Fragments shorter than this (in words) are glued to the sentence before them.
MIN_SENTENCE_WORDS = 4


def split_sentences(text: str) -> list[str]:
    """Split text into sentences and list items, keeping each piece's original wording."""
    pieces: list[str] = []
    for line in text.splitlines():
        line = _LIST_MARKER.sub("", line).strip()
        if not line:
            continue
        protected = _ABBREVIATIONS.sub(lambda m: m.group(0).replace(".", "\0"), line)
        for part in _SENTENCE_END.split(protected):
            part = part.replace("\0", ".").strip()
            if not part:
                continue
            if pieces and len(part.split()) < MIN_SENTENCE_WORDS:
                pieces[-1] = f"{pieces[-1]} {part}"
            else:
                pieces.append(part)
    if len(pieces) > 1 and len(pieces[0].split()) < MIN_SENTENCE_WORDS:
        pieces[1] = f"{pieces[0]} {pieces[1]}"
        pieces.pop(0)
    return pieces or [text.strip()]


def content_words(text: str) -> set[str]:
    """Lower-cased words that carry meaning (no stopwords, no one-letter tokens)."""
    return {w for w in _WORD.findall(text.lower()) if len(w) > 2 and w not in STOPWORDS}


def numbers(text: str) -> set[str]:
    return {n.rstrip("%").replace(",", "") for n in _NUMBER.findall(text)}


def has_negation(text: str) -> bool:
    return _NEGATION.search(text) is not None


_FIRST_PERSON = re.compile(r"\b(?:I|I'm|I've|I'd|me|my|mine)\b")


def first_person(text: str) -> bool:
    """Whether a sentence speaks from personal experience (a common source of tangents)."""
    return _FIRST_PERSON.search(text) is not None


def explanation_markers(text: str) -> int:
    return len(_EXPLANATION_MARKERS.findall(text))


def word_count(text: str) -> int:
    return len(text.split())


def shorten(text: str, limit: int = 90) -> str:
    """A quotable excerpt of `text` (whole when short)."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"
