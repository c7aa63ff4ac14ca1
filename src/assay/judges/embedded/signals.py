"""Evidence for each instruction, computed from sentence embeddings and plain-text cues.

`Evidence` holds one item's texts and their embeddings; `relevance_features` and
`completeness_features` turn it into named numbers. Which numbers feed which instruction is
`CHECK_FEATURES`; the calibrated mapping from those numbers to a probability is fitted by
`bench/calibrate.py` and lives in `calibration.json`.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from assay.judges.embedded import agreement as A
from assay.judges.embedded import arithmetic as AR
from assay.judges.embedded import crosscheck as C
from assay.judges.embedded import form as F
from assay.judges.embedded import text as T
from assay.judges.embedded.encoder import Matrix

#: A context statement counts as covered when some response sentence is at least this similar.
COVERED = 0.6
#: A response sentence counts as supported when some context statement is at least this similar.
SUPPORTED = 0.45
#: A response sentence at least this similar to a context statement restates it.
ALIGNED = 0.6
#: A response sentence less similar than this to both the query and the context is off topic.
OFFTOPIC = 0.3
#: Joins several quoted sentences in a note (split again by the explanations).
SEPARATOR = "\u241e"
#: A context document out of play for the coverage checks (`in_play`) is this much less close to
#: the query than the closest document, and less close than IN_PLAY_FLOOR.
IN_PLAY_MARGIN = 0.15
IN_PLAY_FLOOR = 0.45
#: Context length (words) below which an answer's length counts relative to its context.
NEEDED_WORDS = 100
#: Most context statements an item may have: the judge reads all of them or refuses the item
#: (`input_too_long`), never a part, so no verdict covers less than the caller sent. The dev
#: data's longest context has 24, its longest answer 32 sentences.
MAX_CONTEXT_STATEMENTS = 1000
#: Most response sentences (and clauses) an item may have, likewise.
MAX_RESPONSE_SENTENCES = 1000

#: The evidence behind each instruction. The sign says which way a feature may push the
#: probability (`+`: more of it means more likely followed); the calibration fit keeps to it, so
#: no check can learn a backwards rule from a quirk of the dev data.
CHECK_FEATURES: dict[str, tuple[str, ...]] = {
    # output_relevance
    "core_intent": ("+q_resp", "+q_sent_max", "+q_word_cover"),
    "prioritize_relevant": (
        "+q_sent_mean",
        "+q_sent_first",
        "-q_offtopic_share",
        "-aside_share",
        "+cohesion_min",
    ),
    "no_tangents": (
        "+q_sent_min",
        "+cohesion_min",
        "-q_offtopic_share",
        "+loo_centroid_min",
        "-first_person_share",
        "-aside_share",
        "-n_sentences_log",
    ),
    "no_misinterpretation": ("+q_resp", "+q_word_cover", "+q_sent_mean"),
    # completeness
    "query_aspects": ("+aspect_cover_min", "+aspect_cover_mean", "+q_resp", "+ctx_cover_mean"),
    "key_information": (
        "+ctx_word_recall",
        "+entailed_cover_mean",
        "+entailed_cover_share",
        "+ctx_cover_mean",
        "+ctx_cover_share",
        "+ctx_cover_min",
        "+ctx_cover_weighted",
    ),
    "no_omissions": (
        "+entailed_cover_mean",
        "+ctx_cover_weighted",
        "+ctx_cover_share",
        "+aspect_cover_min",
        "+info_ratio",
        "+length_for_context_log",
    ),
    "faithful_interpretation": (
        "-restated_contra_max",
        "-restated_contra_count",
        "-ctx_contra_max",
        "-ctx_conflict_negation",
        "-ctx_conflict_number",
        "-ctx_conflict_name",
        "-ctx_conflict_opposite",
    ),
    "clear_structure": (
        "-redundancy",
        "-duplicate_share",
        "-longest_sentence_log",
        "-long_sentence_share",
        "+adjacency_gain",
        "+first_sentence_rank",
        "-dangling_reference",
        "+order_agreement",
        "-looped_share",
        "-dependent_opening",
        "-misplaced_markers",
        "+lexical_diversity",
    ),
    "explains_when_needed": (
        "+explanation_markers_log",
        "+explained_share",
        "+elaboration",
        "-explanation_needed",
        "-unexplained_need",
    ),
    "no_contradiction": (
        "-restated_contra_max",
        "-restated_contra_count",
        "-self_contra_max",
        "-self_conflict",
        "-ctx_conflict_negation",
        "-ctx_conflict_number",
        "-ctx_conflict_name",
        "-ctx_conflict_opposite",
    ),
    "accurate_and_focused": (
        "-unstated_number_share",
        "+entailed_support_mean",
        "+grounding_min",
        "-unsupported_log",
        "+resp_support_mean",
        "-unsupported_share",
        "-ctx_offtopic_share",
        "+loo_centroid_min",
        "+ctx_cover_mean",
    ),
}


def feature_names(check: str) -> tuple[str, ...]:
    return tuple(spec[1:] for spec in CHECK_FEATURES[check])


def feature_signs(check: str) -> tuple[int, ...]:
    return tuple(1 if spec[0] == "+" else -1 for spec in CHECK_FEATURES[check])


@dataclass
class Evidence:
    """One item's texts, split and embedded, plus the features computed so far."""

    response: str
    query: str | None
    context: tuple[str, ...]
    written: list[str] = field(init=False)
    sentences: list[str] = field(init=False)
    statements: list[str] = field(init=False)
    statement_docs: list[int] = field(init=False)
    aspects: list[str] = field(init=False)
    vectors: dict[str, Matrix] = field(default_factory=dict)
    features: dict[str, float] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    #: Sentence pairs for the agreement model, and its answers (set by the judge).
    context_pairs: list[C.Pair] = field(default_factory=list)
    own_pairs: list[C.Pair] = field(default_factory=list)
    agreement: dict[C.Pair, C.Probabilities] = field(default_factory=dict)
    #: Why the context checks refuse this item (`context_too_long`); its context is then
    #: left out and only the checks that read no context are answered.
    context_refused: str | None = None

    def __post_init__(self) -> None:
        # Notes join quoted sentences with SEPARATOR, so the texts must not hold it themselves;
        # HTML is read as the text it renders, typographic apostrophes as plain ones.
        self.response = T.readable(self.response).replace(SEPARATOR, " ")
        self.query = T.readable(self.query).replace(SEPARATOR, " ") if self.query else self.query
        self.context = tuple(T.readable(doc).replace(SEPARATOR, " ") for doc in self.context)
        # Sentences as written (for form: run-ons, lengths), and the units judged for meaning:
        # the same sentences with run-ons cut at clause boundaries, so that one long sentence
        # holding many claims is weighed claim by claim.
        self.written = T.split_sentences(self.response)
        units = [u for s in self.written for u in T.clauses(s)]
        # A courtesy ("Hope this helps!") is judged for form only, unless it is all there is.
        self.sentences = [u for u in units if not T.courtesy(u)] or units
        split = [T.split_sentences(doc) for doc in self.context]
        self.statements = [s for sentences in split for s in sentences]
        #: Which document each statement comes from.
        self.statement_docs = [d for d, sentences in enumerate(split) for _ in sentences]
        self.aspects = _query_aspects(self.query) if self.query else []

    @property
    def too_long(self) -> str | None:
        """Why the judge refuses this item (more sentences than it reads), or None: a verdict
        on part of a text would hide whatever the rest holds."""
        sentences = max(len(self.written), len(self.sentences))
        if sentences > MAX_RESPONSE_SENTENCES:
            return (
                f"generated_text has {sentences:,} sentences and clauses; the embedded judge "
                f"reads at most {MAX_RESPONSE_SENTENCES:,}: split the answer or judge it in parts"
            )
        return None

    @property
    def context_too_long(self) -> str | None:
        """Why the checks that read the context refuse this item, or None."""
        if len(self.statements) > MAX_CONTEXT_STATEMENTS:
            return (
                f"context has {len(self.statements):,} sentences; the embedded judge reads at "
                f"most {MAX_CONTEXT_STATEMENTS:,}: pass the documents the answer was built from"
            )
        return None

    def texts(self) -> list[str]:
        """Every text this item needs embedded (duplicates are fine; the judge dedups).

        Whole texts are not encoded: the response's and context's vectors are the word-weighted
        means of their sentences, which halves encoder work and sees past the 256-token window.
        """
        wanted = [*self.sentences, *self.statements, *self.aspects]
        if self.query:
            wanted.append(self.query)
        return wanted

    def attach(self, lookup: Callable[[str], Matrix]) -> None:
        def stack(items: Sequence[str]) -> Matrix:
            return np.stack([lookup(t) for t in items]) if items else np.zeros((0, 384), np.float32)

        sentences, statements = stack(self.sentences), stack(self.statements)
        self.vectors = {
            "response": _mean_vector(sentences, self.sentences),
            "sentences": sentences,
            "statements": statements,
            "aspects": stack(self.aspects),
            "query": stack([self.query] if self.query else []),
            "context": _mean_vector(statements, self.statements),
        }

    def plan_pairs(self) -> list[C.Pair]:
        """Choose the sentence pairs the agreement model should read (after `attach`)."""
        v = self.vectors
        # Kept for `completeness_features`, which reads the same similarities.
        v["statement_sentence"] = v["statements"] @ v["sentences"].T
        v["sentence_sentence"] = v["sentences"] @ v["sentences"].T
        self.context_pairs = C.context_pairs(
            self.statements, self.sentences, v["statement_sentence"]
        )
        self.own_pairs = C.self_pairs(self.sentences, v["sentence_sentence"])
        # A remark on what the documents do not say claims nothing that could contradict them.
        remarks = self.remarks
        if remarks:
            self.context_pairs = [p for p in self.context_pairs if p[1] not in remarks]
            self.own_pairs = [p for p in self.own_pairs if not set(p) & remarks]
        return self.context_pairs + self.own_pairs

    @property
    def remarks(self) -> frozenset[str]:
        """The response sentences that say what the sources do not state, or whom to ask
        (`T.source_remark`)."""
        return frozenset(s for s in self.sentences if T.source_remark(s))


def _mean_vector(vectors: Matrix, texts: Sequence[str]) -> Matrix:
    """The unit-length, word-count-weighted mean of `vectors`, as a 1-row matrix."""
    if not texts:
        return np.zeros((0, 384), np.float32)
    weights = np.array([max(T.word_count(t), 1) for t in texts], dtype=np.float32)
    mean = (vectors * weights[:, None]).sum(axis=0)
    unit: Matrix = (mean / max(float(np.linalg.norm(mean)), 1e-12))[None, :].astype(np.float32)
    return unit


#: "... and can I ...": a second question joined to the first.
_JOINED_QUESTION = re.compile(
    r",?\s+(?:and|or)\s+(?=(?:can|could|do|does|did|is|are|was|were|will|would|should|what|how|"
    r"when|where|why|which|who)\b)",
    re.I,
)


def _query_aspects(query: str) -> list[str]:
    """The separate things a query asks: its sentences, and `and`-joined questions split apart."""
    parts = [
        piece.strip()
        for sentence in T.split_sentences(query)
        for piece in _JOINED_QUESTION.split(sentence)
        if T.content_words(piece)
    ]
    return parts or [query]


def shared_features(ev: Evidence) -> None:
    """Features both detectors use: length, asides, and how well each sentence fits the rest."""
    sentences = ev.vectors["sentences"]
    n = len(ev.sentences)
    if n > 1:
        # Each sentence against the mean of the others: an inserted tangent fits nowhere.
        total = sentences.sum(axis=0)
        others = total[None, :] - sentences
        others /= np.maximum(np.linalg.norm(others, axis=1, keepdims=True), 1e-12)
        fit = (sentences * others).sum(axis=1)
    else:
        fit = np.ones(1, np.float32)
    ev.features.update(
        n_sentences_log=math.log(n),
        loo_centroid_min=float(fit.min()),
        first_person_share=sum(T.first_person(s) for s in ev.sentences) / n,
        aside_share=sum(T.aside(s) for s in ev.sentences) / n,
    )
    ev.notes["least_fitting_sentence"] = ev.sentences[int(fit.argmin())]


def relevance_features(ev: Evidence) -> None:
    """Query↔response alignment: whole response, each sentence, and the query's key terms."""
    v = ev.vectors
    query = v["query"][0]
    # A sentence may answer one part of a multi-part query better than the query as a whole.
    sims = np.maximum(v["sentences"] @ query, (v["sentences"] @ v["aspects"].T).max(axis=1))
    top = float(sims.max())
    offtopic = sims < max(0.15, 0.45 * top)
    query_words = T.content_words(ev.query or "")
    response_words = T.content_words(ev.response)
    covered = {w for w in query_words if any(r.startswith(w[:5]) for r in response_words)}
    # Per written sentence, the share of its content words that the query or another sentence
    # also uses: a tangent brings words nothing else in the exchange needs.
    stems = [T.word_stems(s) for s in ev.written]
    counts = Counter(stem for sentence in stems for stem in sentence)
    query_stems = T.word_stems(ev.query or "")
    cohesion = [
        sum(1 for stem in sentence if counts[stem] > 1 or stem in query_stems) / len(sentence)
        for sentence in stems
        if sentence
    ]
    ev.features.update(
        q_resp=float(v["response"][0] @ query),
        q_sent_mean=float(sims.mean()),
        q_sent_min=float(sims.min()),
        q_sent_max=top,
        q_sent_first=float(sims[0]),
        q_offtopic_share=float(offtopic.mean()),
        q_word_cover=len(covered) / len(query_words) if query_words else 1.0,
        cohesion_min=min(cohesion, default=1.0),
    )
    best = int(sims.argmax())
    worst = int(sims.argmin())
    ev.notes.update(
        best_sentence=ev.sentences[best],
        worst_sentence=ev.sentences[worst],
        offtopic_sentences=SEPARATOR.join(
            s for s, off in zip(ev.sentences, offtopic, strict=True) if off
        ),
        missing_query_terms=", ".join(sorted(query_words - covered)[:4]),
        query_terms=str(len(query_words)),
        covered_query_terms=str(len(covered)),
    )


def in_play(ev: Evidence) -> np.ndarray:
    """Which context statements the coverage checks ask for: those of the documents about what
    the query asks. A retriever returns several documents, and one about another topic (the
    clinic's whitening prices, for a question about cancelling) holds no key information for
    this query, so an answer that leaves it out omits nothing.

    A document's closeness to the query is that of its statement closest to the query or to one
    of the query's parts. It is out of play only when it is both IN_PLAY_MARGIN less close than
    the closest document and under IN_PLAY_FLOOR: the documents of a policy all answer "what is
    the refund policy?", however much more one of them shares the query's words. One document,
    or no query: every statement is in play.
    """
    if not ev.query or len(set(ev.statement_docs)) < 2:
        return np.ones(len(ev.statements), dtype=bool)
    v = ev.vectors
    docs = np.array(ev.statement_docs, dtype=np.int64)
    probes = np.vstack([v["query"], v["aspects"]])
    closeness = (v["statements"] @ probes.T).max(axis=1)
    per_doc = {int(d): float(closeness[docs == d].max()) for d in set(ev.statement_docs)}
    best = max(per_doc.values())
    keep = {d for d, c in per_doc.items() if c >= min(best - IN_PLAY_MARGIN, IN_PLAY_FLOOR)}
    return np.array([int(d) in keep for d in docs], dtype=bool)


def completeness_features(ev: Evidence) -> None:
    """Coverage of context statements, support of response sentences, conflicts, form (after
    `Evidence.plan_pairs` and the agreement model's answers)."""
    v = ev.vectors
    sentences = v["sentences"]
    pair = v["statement_sentence"]
    support = pair.max(axis=0)
    # Coverage reads the statements in play; support and conflicts read the whole context.
    play = in_play(ev)
    asked = [s for s, p in zip(ev.statements, play, strict=True) if p]
    statements = v["statements"][play]
    coverage = pair[play].max(axis=1)
    remarks = ev.remarks
    is_remark = [s in remarks for s in ev.sentences]
    if ev.query:
        relevance = statements @ v["query"][0]
        weights = np.exp(relevance * 10.0)
        weighted = float((coverage * weights).sum() / weights.sum())
        aspect_cover = (v["aspects"] @ sentences.T).max(axis=1)
        q_resp = float(v["response"][0] @ v["query"][0])
        topic = sentences @ v["query"][0]
        on_topic = np.maximum(support, topic)
    else:
        weighted = float(coverage.mean())
        aspect_cover = coverage
        q_resp = float(v["response"][0] @ v["context"][0])
        topic = sentences @ v["context"][0]
        on_topic = support
    self_sims = v["sentence_sentence"]
    n = len(ev.sentences)
    # Informative words: on-topic sentences that do not repeat an earlier one.
    repeated = {k for j in range(n) for k in range(j + 1, n) if self_sims[j, k] >= F.DUPLICATE}
    informative = sum(
        T.word_count(s)
        for k, s in enumerate(ev.sentences)
        if k not in repeated and on_topic[k] >= OFFTOPIC
    )
    kept = {d for d, p in zip(ev.statement_docs, play, strict=True) if p}
    context_words = max(T.word_count(" ".join(ev.context[d] for d in sorted(kept))), 1)
    # Per context statement, the share of its content words (stems) that the response uses in
    # sentences restating the context: stated information is mostly restated in its own words.
    # Only restating sentences count, so added content that borrows a context word covers nothing.
    sentence_stems = [T.word_stems(s) for s in ev.sentences]
    response_stems = {
        stem
        for stems, best in zip(sentence_stems, support, strict=True)
        if best >= SUPPORTED
        for stem in stems
    }
    every_stems = [T.word_stems(s) for s in ev.statements]
    statement_stems = [stems for stems in every_stems if stems]
    asked_stems = [stems for stems, p in zip(every_stems, play, strict=True) if p and stems]
    word_recall = [len(stems & response_stems) / len(stems) for stems in asked_stems]
    # Per response sentence, the share of its content words the context uses: an added claim
    # the context never mentions shares few of them.
    context_stems = set().union(*statement_stems) if statement_stems else set()
    # The asker's own words are grounded too: an answer applies the context to their situation
    # ("you owe $340, so you qualify").
    context_stems |= T.word_stems(ev.query or "")
    grounding = {
        sentence: len(stems & context_stems) / len(stems)
        for sentence, stems in zip(ev.sentences, sentence_stems, strict=True)
        if stems and sentence not in remarks
    }
    # Per written sentence, how much of it loops on one phrase ("the the the").
    loops = [F.looped_share(s) for s in ev.written]
    most_looped = max(loops, default=0.0)
    # A number the answer states that neither the context nor the query does: an invented figure,
    # unless a sentence that says it computes works it out from them ("£22 plus £10, so £32").
    query_figures = T.numbers(ev.query or "", plain=True)
    given = T.numbers(" ".join(ev.context), plain=True) | query_figures
    computing = [s for s in ev.sentences if AR.computes(s)]
    worked = AR.worked_out(ev.sentences, given, ev.query or "")
    given |= worked
    # The asker's own figures are no changed ones ("at 10 days you're still in time"); in a
    # computing sentence no given or worked-out figure is either.
    settled = dict.fromkeys(ev.sentences, frozenset(query_figures)) | dict.fromkeys(
        computing, frozenset(given)
    )
    known = A.known_words(" ".join(ev.context), worked | query_figures)
    stated = A.stated_sentences(ev.statements, ev.sentences, pair)
    ctx_conflicts = A.context_conflicts(ev.statements, ev.sentences, pair, known, stated | remarks)
    own_conflicts = A.self_conflicts(ev.sentences, self_sims, known, stated, remarks)
    unstated = [s for s in ev.sentences if s not in remarks and T.numbers(s) - given]
    closest = (
        {ev.sentences[j]: ev.statements[int(pair[:, j].argmax())] for j in range(len(ev.sentences))}
        if ev.statements
        else {}
    )
    entailed, quotes = C.features(
        asked, ev.sentences, ev.context_pairs, ev.own_pairs, ev.agreement, closest, settled, known
    )
    ev.features.update(
        **entailed,
        ctx_cover_mean=float(coverage.mean()),
        ctx_cover_min=float(coverage.min()),
        ctx_cover_share=float((coverage >= COVERED).mean()),
        ctx_cover_weighted=weighted,
        ctx_word_recall=float(np.mean(word_recall)) if word_recall else 0.0,
        grounding_min=min(grounding.values(), default=1.0),
        unstated_number_share=len(unstated) / n,
        resp_support_mean=float(support.mean()),
        # A remark on what the documents do not say adds no claim, so it is not unsupported.
        unsupported_share=float(
            np.mean([b < SUPPORTED and not r for b, r in zip(support, is_remark, strict=True)])
        ),
        ctx_offtopic_share=float((on_topic < OFFTOPIC).mean()),
        aspect_cover_min=float(aspect_cover.min()),
        aspect_cover_mean=float(aspect_cover.mean()),
        q_resp=q_resp,
        informative_words_log=math.log1p(informative),
        # An answer's length, counted against a context shorter than NEEDED_WORDS as if that
        # context were NEEDED_WORDS long: a one-line context restated whole is not a short answer.
        length_for_context_log=math.log1p(informative * max(1.0, NEEDED_WORDS / context_words)),
        info_ratio=math.log((informative + 1) / context_words),
        self_conflict=A.weight(own_conflicts),
        looped_share=most_looped,
        **{f"ctx_conflict_{kind}": A.weight(ctx_conflicts, kind) for kind in A.CONFLICT_KINDS},
        **F.structure_features(
            ev.written,
            ev.sentences,
            self_sims,
            ev.response,
            [float(x) for x in topic],
            [int(pair[:, j].argmax()) if support[j] >= ALIGNED else None for j in range(n)],
        ),
        # Only sentences on the topic can explain it: a tangent's "because" explains nothing.
        **F.explanation_features(
            [u for u, t in zip(ev.sentences, on_topic, strict=True) if t >= OFFTOPIC]
            or ev.sentences,
            ev.query,
        ),
    )
    # What explanations call restated: close to a response sentence, and with every figure it
    # states said in the response ("Express takes 3 to 5 days" is not restated by an answer
    # about Standard's 7 to 14 days, however alike the sentences are).
    said = T.numbers(ev.response, plain=True)
    restates = [
        coverage[i] >= COVERED and T.numbers(statement) <= said for i, statement in enumerate(asked)
    ]
    missing = [asked[i] for i in np.argsort(coverage) if not restates[i]]
    restated = [asked[i] for i in np.argsort(-coverage) if restates[i]]
    unsupported = [
        ev.sentences[j] for j in np.argsort(support) if support[j] < SUPPORTED and not is_remark[j]
    ]
    ev.notes.update(
        covered=str(sum(restates)),
        statements=str(len(asked)),
        set_aside=str(len(ev.statements) - len(asked)),
        missing_statements=SEPARATOR.join(missing[:3]),
        restated_statements=SEPARATOR.join(restated[:3]),
        unsupported_sentences=SEPARATOR.join(unsupported[:3]),
        ctx_offtopic_sentences=SEPARATOR.join(
            s for s, t in zip(ev.sentences, on_topic, strict=True) if t < OFFTOPIC
        ),
        weakest_aspect=ev.aspects[int(aspect_cover.argmin())] if ev.aspects else "",
        least_grounded_sentence=min(grounding, key=grounding.__getitem__) if grounding else "",
        unstated_sentence=unstated[0] if unstated else "",
        unstated_numbers=", ".join(
            sorted(
                {w for s in unstated for x, w in T.figures(s).items() if x not in given}, key=len
            )[:3]
        ),
        context_conflict=_describe(ctx_conflicts),
        self_conflict=_describe(own_conflicts),
        repeated_sentence=ev.sentences[min(repeated)] if repeated else "",
        looped_sentence=ev.written[loops.index(most_looped)] if most_looped > 0 else "",
        contradicted_pair=SEPARATOR.join(quotes["context"]) if "context" in quotes else "",
        restated_contradicted_pair=SEPARATOR.join(quotes["restated"])
        if "restated" in quotes
        else "",
        self_contradicted_pair=SEPARATOR.join(quotes["self"]) if "self" in quotes else "",
    )


def _describe(conflicts: Sequence[A.Conflict]) -> str:
    if not conflicts:
        return ""
    c = conflicts[0]
    return f"{c.kind}{SEPARATOR}{c.first}{SEPARATOR}{c.second}"
