"""Plain-text helpers for the embedded judge: sentences, content words, cues, structure."""

from __future__ import annotations

import html
import re
from fractions import Fraction

# A sentence ends at . ! or ? followed by space and an upper-case letter (Latin, Greek or
# Cyrillic), digit, emoji, quote or bracket, or at a line break. Abbreviations like "e.g." are
# protected first so they do not split.
_ABBREVIATIONS = re.compile(
    r"\b(?:e\.g|i\.e|etc|vs|Mr|Mrs|Ms|Dr|Prof|St|Mt|No|approx|incl|Fig|Gen|Sen|Rep|Gov|Capt"
    r"|Lt|Col|Sgt)\."
    # A month's abbreviation before its day ("Jan. 5"); a.m./p.m. before a day, a month, a
    # figure, a bracket or a time zone ("9 a.m. Monday to Friday", "3 p.m. Eastern cutoff",
    # "5 p.m. GMT"), not before a new sentence.
    r"|\b(?:Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec)\.(?=\s\d)"
    r"|\b[ap]\.m\.(?=\s+(?-i:\d|\(|(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun|Jan|Feb|Mar|Apr|May|Jun|Jul"
    r"|Aug|Sep|Oct|Nov|Dec)[a-z]*\b|(?:Eastern|Pacific|Central|Mountain|Atlantic)\b|[A-Z]{2,}\b))",
    re.I,
)
# An initial ("John A. Roebling", "J. K. Rowling") or a name's suffix ("King Jr. Day", "Acme
# Inc. Europe") before a capitalised word that does not open sentences (`STOPWORDS`).
_NAME_DOT = re.compile(r"\b(?:[A-Z]|Jr|Sr|Inc|Ltd|Corp|Co)\.(?=\s+([A-Z][\w'-]*))")
_SENTENCE_END = re.compile(
    r"(?<=[.!?])[\"')\]]*\s+"
    r"(?=[\"'(\[]?[A-Z0-9\u00c0-\u00d6\u00d8-\u00de\u0391-\u03a9\u0400-\u042f"
    r"\u2600-\u27bf\U0001f300-\U0001faff])"
)
# Inside a short parenthesis (no line break) ! and ? end nothing: "Viaweb (later Yahoo! Store)".
# A full stop there still does: whole sentences in brackets are common in answers.
_PARENTHESIZED = re.compile(r"\([^()\n]{1,200}\)")
_HIDE = str.maketrans({".": "\0", "!": "\1", "?": "\2"})
_SHOW = str.maketrans({"\0": ".", "\1": "!", "\2": "?"})
_LIST_MARKER = re.compile(r"^\s*(?:[-*•+]|\d+[.)]|step\s+\d+\s*[:.)])\s+", re.I)
# Markdown that labels or lays out text but states nothing: headings and table rules are
# dropped, fences dropped around their code, table pipes taken out.
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s")
_FENCE = re.compile(r"^\s*(?:```|~~~)")
_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{2,}:?\s*(?:\|\s*:?-{2,}:?\s*)*\|?\s*$")
# HTML that a chat front end would render. Only text with a closing tag or a <br> is read as
# HTML, and only known tag names are touched, so "a <b and c> d" in prose stays as it is.
_HTML_SIGN = re.compile(r"</[a-z][a-z0-9]*\s*>|<br\s*/?>", re.I)
_HTML_HEADING = re.compile(r"<h[1-6]\b[^<>]*>.*?</h[1-6]\s*>", re.I | re.S)
_HTML_PRE = re.compile(r"</?pre\b[^<>]*>", re.I)
_HTML_ROW_END = re.compile(r"</t[dh]\s*>\s*(?=</tr\b)", re.I)
_HTML_CELL_END = re.compile(r"</t[dh]\s*>", re.I)
_HTML_BLOCK = re.compile(
    r"</?(?:p|div|li|ul|ol|tr|table|thead|tbody|tfoot|blockquote|section|article|header|footer|"
    r"dl|dt|dd|figure|figcaption|main|nav|aside)\b[^<>]*>|<(?:br|hr)\b[^<>]*>",
    re.I,
)
_HTML_INLINE = re.compile(
    r"</?(?:a|abbr|b|cite|code|del|em|font|i|img|ins|kbd|mark|q|s|small|span|strong|sub|sup|"
    r"td|th|u|var)\b[^<>]*>",
    re.I,
)
_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
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


#: Typographic apostrophes (’ ‘ ʼ): contractions and negations are matched with a plain one.
_APOSTROPHES = str.maketrans(dict.fromkeys("\u2019\u2018\u02bc", "'"))


def readable(text: str) -> str:
    """`text` as the judges read it: HTML as the text it renders (`from_html`), typographic
    apostrophes as plain ones ("aren’t" is "aren't", a negation, not "aren" and "t")."""
    return from_html(text).translate(_APOSTROPHES)


def from_html(text: str) -> str:
    """`text` as plain lines when it is HTML: block tags end a line, headings are dropped (like
    markdown's), a <pre> block becomes a fenced one, a table row's cells are joined by commas,
    inline tags go and entities become their characters. Other text is returned unchanged."""
    if not _HTML_SIGN.search(text):
        return text
    text = _HTML_HEADING.sub("\n", text)
    text = _HTML_PRE.sub("\n```\n", text)
    text = _HTML_CELL_END.sub(", ", _HTML_ROW_END.sub("", text))
    text = _HTML_INLINE.sub("", _HTML_BLOCK.sub("\n", text))
    return html.unescape(text)


def _lines(text: str) -> list[tuple[str, bool]]:
    """The text's lines as prose, with whether each is a code block (a unit of its own, never
    glued to the piece before it): list markers taken off, markdown headings and table rules
    dropped, a table row's cells joined by commas, a fenced code block one line."""
    out: list[tuple[str, bool]] = []
    code: list[str] | None = None
    for line in text.splitlines():
        if _FENCE.match(line):
            if code:
                out.append((" ".join(code), True))
            code = None if code is not None else []
            continue
        if code is not None:
            code.append(line.strip())
        elif not (_HEADING.match(line) or _TABLE_RULE.match(line)):
            stripped = line.strip()
            if len(stripped) > 1 and stripped[0] == stripped[-1] == "|":
                stripped = ", ".join(cell.strip() for cell in stripped[1:-1].split("|"))
            out.append((_LIST_MARKER.sub("", stripped).strip(), False))
    if code:  # an unclosed fence
        out.append((" ".join(code), True))
    return out


def _hide_name_dot(match: re.Match[str]) -> str:
    if match.group(1).lower() in STOPWORDS:  # "… Plan B. The fee …" ends a sentence
        return match.group(0)
    return match.group(0).translate(_HIDE)


def split_sentences(text: str) -> list[str]:
    """Split text into sentences and list items, keeping each piece's original wording (less
    markdown layout: see `_lines`). Pieces under MIN_SENTENCE_WORDS words are glued to the one
    before (short list items too: tried as units of their own, see DEVELOPERS.md), except a
    courtesy ("Hope this helps!"), which the judge sets aside."""
    pieces: list[str] = []
    for line, own_unit in _lines(text):
        if not line:
            continue
        protected = _ABBREVIATIONS.sub(lambda m: m.group(0).translate(_HIDE), line)
        protected = _NAME_DOT.sub(_hide_name_dot, protected)
        protected = _PARENTHESIZED.sub(
            lambda m: m.group(0).replace("!", "\1").replace("?", "\2"), protected
        )
        for part in _SENTENCE_END.split(protected):
            part = part.translate(_SHOW).strip()
            if not part:
                continue
            short = len(part.split()) < MIN_SENTENCE_WORDS and not courtesy(part)
            if pieces and not own_unit and short:
                pieces[-1] = f"{pieces[-1]} {part}"
            else:
                pieces.append(part)
            own_unit = False
    if len(pieces) > 1 and len(pieces[0].split()) < MIN_SENTENCE_WORDS and not courtesy(pieces[0]):
        pieces[1] = f"{pieces[0]} {pieces[1]}"
        pieces.pop(0)
    return pieces or [text.strip()]


#: Sentences longer than this (in words) are cut at clause boundaries into judged units.
LONG_SENTENCE_WORDS = 45
MIN_CLAUSE_WORDS = 8
_CLAUSE_BREAK = re.compile(r"(?:,|;)\s+(?=\S)|\s+(?=(?:and|but|while|whereas)\s)")


def clauses(sentence: str) -> list[str]:
    """A long sentence cut into clauses of at least MIN_CLAUSE_WORDS words (a short sentence
    whole): a run-on holding many claims is judged claim by claim."""
    if len(sentence.split()) <= LONG_SENTENCE_WORDS:
        return [sentence]
    pieces: list[str] = []
    start = 0
    for m in _CLAUSE_BREAK.finditer(sentence):
        piece = sentence[start : m.start()].strip()
        if len(piece.split()) >= MIN_CLAUSE_WORDS:
            pieces.append(piece)
            start = m.end()
    rest = sentence[start:].strip()
    if pieces and len(rest.split()) < MIN_CLAUSE_WORDS:
        pieces[-1] = sentence[sentence.index(pieces[-1]) :].strip()
    elif rest:
        pieces.append(rest)
    return pieces or [sentence]


def content_words(text: str) -> set[str]:
    """Lower-cased words that carry meaning (no stopwords, no one-letter tokens)."""
    return {w for w in _WORD.findall(text.lower()) if len(w) > 2 and w not in STOPWORDS}


def word_stems(text: str) -> set[str]:
    """The first five letters of each content word: "covered" matches "covers" and "coverage"."""
    return {w[:5] for w in content_words(text)}


#: A word and a common ending, the word keeping at least three letters ("booking" → "book").
_ENDING = re.compile(r"(.{3,}?)(?:ing|ed|ly|es|s)")


def word_roots(text: str) -> frozenset[str]:
    """Like `word_stems`, but with common endings taken off first, as often as they occur, so
    that "bookings" meets "book" (which `word_stems` cuts to "booki" and "book")."""
    roots = set()
    for word in content_words(text):
        while ending := _ENDING.fullmatch(word):
            word = ending.group(1)
        roots.add(word[:5])
    return frozenset(roots)


_FIRST_PERSON = re.compile(r"\b(?:I|I'm|I've|I'd|me|my|mine)\b")


def first_person(text: str) -> bool:
    """Whether a sentence speaks from personal experience (a common source of tangents)."""
    return _FIRST_PERSON.search(text) is not None


_ASIDE = re.compile(
    r"(?:\b(?:edit|side note|fun fact|by the way|btw|anyway|source|sources|tl;?dr|lol|haha|"
    r"disclaimer|i remember|i think|imo|imho|iirc|hope this helps|good question)\b|[!:;]\)|:\(|!$)",
    re.I,
)


def aside(text: str) -> bool:
    """Whether a sentence is an aside: a remark, a joke, a source note, an opinion marker."""
    return _ASIDE.search(text) is not None


_SOURCES = (
    r"(?:documents?|docs|context|polic(?:y|ies)|sources?|passages?|texts?|materials?|manual|"
    r"leaflet|guide|faq|article|page|information|terms|handbook|records?|sections?|details)"
)
_SOURCE_REMARK = re.compile(
    # "The documents (I have) don't mention ...", "the policy doesn't say how many days ..."
    rf"\b{_SOURCES}(?:\s+[\w']+){{0,3}}?\s+"
    r"(?:do(?:es)?n[o']?t|do(?:es)? not|never|did not|didn't)\s+(?:\w+\s+)?"
    r"(?:say|state|mention|specify|address|indicate|describe|tell|explain|detail)"
    r"|\b(?:there is|there's|i (?:have|found)|with)\s+no\s+(?:information|mention|details?|data)\b"
    r"|\b(?:is|are|was|were)\s*(?:n[o']t|not)\s+(?:mentioned|stated|specified|addressed)\b"
    r"|\bi\s+(?:could not|couldn't|cannot|can't|can not|did not|didn't)\s+(?:find|confirm|tell)\b"
    # Where to ask instead: "please contact billing", "HR can confirm", "ask at reception".
    r"|^\W*(?:please\s+)?(?:contact|ask|check with|reach out to|call|email)\b"
    r"|\b(?:can|could|should be able to|will be able to)\s+"
    r"(?:confirm|advise|tell you (?:more|whether|if))\b",
    re.I,
)


_COURTESY = re.compile(
    r"^\W*(?:(?:i\s+)?hope\s+(?:this|that|it)\s+helps"
    r"|(?:please\s+)?(?:let\s+me|let\s+us)\s+know\s+if"
    r"|(?:please\s+)?feel\s+free\s+to\s+(?:ask|reach\s+out|contact|let)"
    r"|(?:i'm|i\s+am|we're|we\s+are)\s+(?:always\s+)?(?:happy|glad)\s+to\s+help"
    r"|is\s+there\s+anything\s+else"
    r"|if\s+you\s+have\s+any\s+(?:other|more|further)\s+questions"
    r"|thanks?(?:\s+you)?\s+(?:so\s+much\s+)?for\s+(?:reaching\s+out|your\s+question|asking"
    r"|contacting\s+us|getting\s+in\s+touch)"
    r"|great\s+question(?=\W*$))\b[^.!?,;:\d]*"
    # "If you have any other questions, feel free to ask."
    r"(?:,\s*(?:please\s+)?(?:feel\s+free|let\s+(?:me|us)\s+know|just\s+ask|don't\s+hesitate"
    r"|do\s+not\s+hesitate|reach\s+out|contact\s+us)\b[^.!?,;:\d]*)?[.!?]*\W*$"
    # A line that only frames the answer: "Here's what you need to know:", "Sure!", "Based on
    # the provided documents, here is the answer:", "According to the context:".
    r"|^\W*(?:sure|certainly|of\s+course|absolutely|great)\W*$"
    r"|^\W*(?:(?:based\s+on|according\s+to|from)\s+the\s+(?:provided\s+|given\s+|available\s+)?"
    r"(?:documents?|context|information|sources?|passages?)\s*,?\s*)?"
    r"(?:here(?:'s|\s+is|\s+are)\s+(?:what|how|the|a|an|some)\b[^.!?\d]*?)?\W*:\W*$",
    re.I,
)


def courtesy(sentence: str) -> bool:
    """Whether a sentence is only a courtesy ("Let me know if you have any other questions.",
    "Hope this helps!"): it says nothing about the question, so it is neither a tangent nor an
    unsupported claim."""
    return _COURTESY.match(sentence) is not None


def source_remark(sentence: str) -> bool:
    """Whether a sentence says what the sources do not state ("The policy doesn't say how many
    days part-timers get") or whom to ask ("HR can confirm it"): a remark, not a claim that could
    contradict the documents."""
    return _SOURCE_REMARK.search(sentence) is not None


#: A figure, read whole: the atomic group stops a backtrack from reading part of a longer token
#: ("12p" as 1, "21st" as 2). A figure written against its unit ("10am", "12p", "25kg", "the
#: 1990s") is that figure, as it is with a space; against other letters ("21st", "2FA") none.
_GLUED_UNIT = r"(?i:am|pm|p|kg|g|mg|km|cm|mm|ml|h|hrs?|mins?|s|k|gb|mb|tb)?"
_NUMBER = re.compile(rf"(?<![\w.,])(?>\d+(?:[.,]\d+)*)(?={_GLUED_UNIT}(?![A-Za-z]))")
#: A capitalised word right before a number, not opening its sentence: "IBM 1401", "Windows 11".
_NAMED = re.compile(r"(?<=[a-z0-9,;:)] )[A-Z][\w-]*\s$|^[A-Z]{2,}[\w-]*\s$")
#: A unit of time right after a figure ("14 days", "2-week").
_UNIT_AFTER = re.compile(
    r"[ -]?(minutes?|mins?|hours?|hrs?|days?|weeks?|wks?|months?|years?|yrs?)\b", re.I
)
#: Each unit in the smallest unit of its family: minutes, or months.
_IN_MINUTES = {
    "min": 1, "minute": 1, "hour": 60, "hr": 60, "day": 1440, "week": 10080, "wk": 10080
}  # fmt: skip
_IN_MONTHS = {"month": 1, "year": 12, "yr": 12}
_MONTH = (
    r"(Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?"
    r"|Sep(?:t|tember)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)"
)
#: A month named next to a day: "March 5", "5 March", "Mar. 5".
_NAMED_DATE = re.compile(rf"\b{_MONTH}\.? \d{{1,2}}\b|\b\d{{1,2}} {_MONTH}\b")
_MONTH_BEFORE = re.compile(rf"\b{_MONTH}\.? $")
_MONTH_WORD = re.compile(_MONTH)
_DAY_AFTER = re.compile(r"\.? \d{1,2}\b")
_DAY_BEFORE = re.compile(r"\b\d{1,2} $")
_MONTH_NAMES = "jan feb mar apr may jun jul aug sep oct nov dec".split()


_SMALL = (
    "two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
    "sixteen seventeen eighteen nineteen"
).split()
_TENS = "twenty thirty forty fifty sixty seventy eighty ninety".split()
_DIGITS = ["one", *_SMALL[:8]]
#: A number written as words, from two to ninety-nine ("one" is left alone: "one of the ...").
_NUMBER_WORD = re.compile(
    rf"\b(?:({'|'.join(_TENS)})(?:[- ]({'|'.join(_DIGITS)}))?|({'|'.join(_SMALL)}))\b", re.I
)


def _as_digits(match: re.Match[str]) -> str:
    tens, unit, small = (group.lower() if group else None for group in match.groups())
    if small:
        return str(_SMALL.index(small) + 2)
    return str(20 + 10 * _TENS.index(tens or "") + (_DIGITS.index(unit) + 1 if unit else 0))


def with_digits(text: str) -> str:
    """`text` with numbers written as words in figures ("four guests" is "4 guests",
    "twenty-five days" is "25 days"), so that a figure reads the same either way."""
    return _NUMBER_WORD.sub(_as_digits, text)


def figures(text: str) -> dict[str, str]:
    """The figures a text states, each as compared (`quantity`) and as written; not ordinals
    ("9th") nor a number that is part of a name ("the IBM 1401"). A month named next to a day
    states its number too, so "March 5" and "2026-03-05" state the same figures."""
    out = {}
    for match in _NUMBER.finditer(text):
        before = text[max(0, match.start() - 40) : match.start()]
        if _NAMED.search(before) and not _MONTH_BEFORE.search(before):
            continue
        written = match.group(0).rstrip(".,")
        after = text[match.start() + len(written) : match.start() + len(written) + 12]
        unit = _UNIT_AFTER.match(after)
        out[quantity(written, after)] = written + (unit.group(0) if unit else "")
    for match in _NAMED_DATE.finditer(text):
        name = match.group(1) or match.group(2)
        out.setdefault(_month_of(name), name)
    return out


def month_number(word: str, before: str, after: str) -> str | None:
    """The month's number when `word` names one next to a day ("March" in "March 5" or
    "5 March"), so that a date reads the same written with the month's name or its number."""
    if not _MONTH_WORD.fullmatch(word):
        return None
    if _DAY_AFTER.match(after) or _DAY_BEFORE.search(before):
        return _month_of(word)
    return None


def _month_of(name: str) -> str:
    """A month's number ("3") from its name or abbreviation ("March", "Mar")."""
    return str(_MONTH_NAMES.index(name[:3].lower()) + 1)


def numbers(text: str, plain: bool = False) -> set[str]:
    """The figures a text states, as compared: see `figures`. With `plain`, each duration's
    number as written too ("24 hours" gives 1 and 24), for the figures a source gives: an
    answer's "24/7" restates it."""
    if not plain:
        return set(figures(text))
    # A source's figures also as words ("four guests" states 4); an answer's are read as
    # written, since its "two main types" counts its own points and invents no figure.
    text = with_digits(text)
    return set(figures(text)) | {
        canonical_number(m.group(0).rstrip(".,")) for m in _NUMBER.finditer(text)
    }


def canonical_number(value: str) -> str:
    """One spelling per figure: thousands commas, leading zeros and a decimal part's trailing
    zeros dropped ("1,200" is "1200", "05" is "5", "25.00" is "25", "2.50" is "2.5"); a
    decimal comma ("2,5") is kept."""
    if re.fullmatch(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?", value):
        value = value.replace(",", "")
    if re.fullmatch(r"\d+\.\d+", value):
        value = value.rstrip("0").rstrip(".")
    if re.fullmatch(r"0+\d+(?:\.\d+)?", value):
        value = value.lstrip("0")
        value = "0" + value if not value or value[0] == "." else value
    return value


def quantity(value: str, after: str) -> str:
    """A figure as compared, given the text after it: `canonical_number`, and a duration in
    one unit per family, so that "2 weeks" and "14 days" (or "24 hours" and "1 day", "1 year"
    and "12 months") are one figure. Minutes, hours, days and weeks become whole days where
    they make them, else whole hours, else minutes; years become months. The unit word stays
    as written, so "1 hour" and "1 day" differ as they did."""
    value = canonical_number(value)
    unit = _UNIT_AFTER.match(after)
    if unit is None or not re.fullmatch(r"\d+(?:\.\d+)?", value):
        return value
    name = unit.group(1).lower()
    name = name[:-1] if name.endswith("s") else name
    if name in _IN_MONTHS:
        amount = Fraction(value) * _IN_MONTHS[name]
    else:
        amount = Fraction(value) * _IN_MINUTES[name]
        for size in (1440, 60):
            if amount % size == 0:
                amount /= size
                break
    if amount.denominator == 1:
        return str(amount.numerator)
    return canonical_number(f"{float(amount):.6f}")


def explanation_markers(text: str) -> int:
    return len(_EXPLANATION_MARKERS.findall(text))


def word_count(text: str) -> int:
    return len(text.split())


def shorten(text: str, limit: int = 90) -> str:
    """A quotable excerpt of `text` (whole when short), cut at a word boundary where one is near."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    if space >= limit * 2 // 3:  # a word is not cut in half unless it is very long
        cut = cut[:space]
    return cut.rstrip(" ,;:") + "…"


#: Words that reverse a comparison or a direction when swapped for their partner.
OPPOSITES = dict(
    pair.split("/")
    for pair in """more/less higher/lower increase/decrease increases/decreases increased/decreased
    larger/smaller bigger/smaller before/after above/below faster/slower better/worse most/least
    always/never maximum/minimum first/last positive/negative earlier/later older/younger
    longer/shorter rise/fall rises/falls gain/loss allow/prohibit allows/prohibits
    include/exclude includes/excludes accept/reject strong/weak stronger/weaker high/low
    easy/difficult easier/harder many/few large/small early/late inside/outside same/different
    similar/different advantage/disadvantage improves/worsens improve/worsen reduce/raise
    reduces/raises cheaper/costlier warmer/cooler hotter/colder heavier/lighter open/closed
    opens/closes true/false legal/illegal possible/impossible available/unavailable
    required/optional safe/unsafe won/lost accepted/rejected""".split()
)
OPPOSITES.update({b: a for a, b in list(OPPOSITES.items()) if b not in OPPOSITES})


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


#: Openers that lean on an earlier sentence; an answer does not start with them.
_DEPENDENT_OPENER = re.compile(
    r"^\W*(?:however|additionally|also|furthermore|moreover|therefore|thus|hence|so|then|"
    r"finally|lastly|overall|in addition|in summary|in conclusion|in short|as a result|"
    r"similarly|likewise|instead|otherwise|meanwhile|this|these|that|those|it|they|its|their|"
    r"he|she|his|her|such|second|secondly|third|thirdly|another|other|both|but|and|or)\b",
    re.I,
)


def dependent_opener(sentence: str) -> bool:
    return _DEPENDENT_OPENER.search(sentence) is not None


def lexical_diversity(text: str, window: int = 40) -> float:
    """Distinct words over all words in a moving window, averaged (1 for no repetition; low for
    "banana banana banana"). The window keeps long texts from looking repetitive by length alone.
    """
    tokens = words(text)
    if len(tokens) <= window:
        return len(set(tokens)) / len(tokens) if tokens else 0.0
    spans = range(0, len(tokens) - window + 1, window // 4)
    return sum(len(set(tokens[i : i + window])) / window for i in spans) / len(spans)
