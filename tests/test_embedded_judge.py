"""The embedded judge: verified weights, one encoder call per request, evidence-backed verdicts."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

import assay
from assay.detectors import DETECTORS
from assay.detectors.evaluate import detect_items, parse_items, questions_for
from assay.judges.base import Question
from assay.judges.embedded import crosscheck as C
from assay.judges.embedded import text as T
from assay.judges.embedded.agreement import context_conflicts, known_words, may_conflict
from assay.judges.embedded.agreement_model import (
    LABELS,
    MAX_TOKENS,
    MODEL_FILE,
    RESIDUALS_FILE,
    WEIGHTS_SHA256,
    AgreementModel,
    leading,
    load_agreement_model,
    rebuild_weights,
)
from assay.judges.embedded.calibration import load_calibration, parse
from assay.judges.embedded.encoder import (
    Kind,
    Matrix,
    ModelFileError,
    load_encoder,
    load_tokenizer,
    verified,
)
from assay.judges.embedded.explanations import explain
from assay.judges.embedded.form import looped_share
from assay.judges.embedded.judge import EmbeddedJudge, gather
from assay.judges.embedded.signals import CHECK_FEATURES
from assay.judges.embedded.text import from_html, split_sentences
from assay.schema import JudgeFailure

QUERY = "What is the refund policy for online orders?"
CONTEXT = [
    "Online orders can be refunded within 30 days of delivery.",
    "Refunds go back to the original payment method within 5 business days.",
    "Sale items are final and cannot be refunded.",
    "Shipping fees are not refunded unless the item arrived damaged.",
]
FULL = (
    "You can get a refund on online orders within 30 days of delivery, and the money returns to "
    "your original payment method within 5 business days. Items bought on sale are final and "
    "cannot be refunded. Shipping fees are not refunded unless the item arrived damaged."
)
ONE_FACT = "Online orders can be refunded within 30 days."
OFF_TOPIC = "Our flagship store in Lisbon has a rooftop cafe. The espresso there is excellent."
TANGENT = FULL + " By the way, the Eiffel Tower was finished in 1889 for the World's Fair."


class CountingEncoder:
    """Wraps the real encoder and counts encode calls."""

    def __init__(self) -> None:
        self.inner = load_encoder("minilm")
        self.model_id = self.inner.model_id
        self.calls = 0

    def encode(self, texts: Sequence[str], kind: Kind = "passage") -> Matrix:
        self.calls += 1
        return self.inner.encode(texts, kind)


async def run(body: list[dict[str, object]]) -> list[dict[str, dict[str, object]]]:
    return await detect_items(parse_items(body), judge="embedded")


def mean_probability(result: dict[str, object]) -> float:
    entries = result["instructions_list"]
    assert isinstance(entries, list)
    return float(np.mean([e["follow_probability"] for e in entries]))


def relevance(response: str) -> dict[str, object]:
    return {
        "user_query": QUERY,
        "generated_text": response,
        "config": {"output_relevance": {"explain": True}},
    }


def completeness(response: str) -> dict[str, object]:
    return {
        "user_query": QUERY,
        "context": CONTEXT,
        "generated_text": response,
        "config": {"completeness": {"explain": True}},
    }


def test_weight_file_must_match_its_pinned_sha256(tmp_path: Path) -> None:
    weights = tmp_path / "model.onnx"
    weights.write_bytes(b"not the model")
    good = hashlib.sha256(b"not the model").hexdigest()
    assert verified(weights, good, "pkg") == weights
    with pytest.raises(ModelFileError, match="expected"):
        verified(weights, "0" * 64, "pkg")
    with pytest.raises(ModelFileError, match="not found"):
        verified(tmp_path / "missing.onnx", good, "pkg")


async def test_on_topic_answer_is_more_relevant_than_off_topic() -> None:
    on, off = await run([relevance(FULL), relevance(OFF_TOPIC)])
    assert on["output_relevance"]["score"] > off["output_relevance"]["score"]
    assert (
        mean_probability(on["output_relevance"]) > mean_probability(off["output_relevance"]) + 0.2
    )


async def test_tangent_is_named_in_the_explanation() -> None:
    [result] = await run([relevance(TANGENT)])
    entries = result["output_relevance"]["instructions_list"]
    assert isinstance(entries, list)
    tangent = next(e for e in entries if "tangential" in e["instruction"])
    assert "Eiffel Tower" in tangent["explanation"]


async def test_covering_every_fact_is_more_complete_than_covering_one() -> None:
    full, partial = await run([completeness(FULL), completeness(ONE_FACT)])
    assert full["completeness"]["score"] >= partial["completeness"]["score"]
    assert mean_probability(full["completeness"]) > mean_probability(partial["completeness"])


def completeness_feature(response: str, name: str) -> float:
    question = Question("completeness", "key_information", "", response, QUERY, tuple(CONTEXT))
    [evidence] = gather(load_encoder("minilm"), [question]).values()
    return evidence.features[name]


ADDED_CLAIM = " Our Lisbon store sells original paintings by local artists."


def test_context_words_count_where_a_sentence_restates_the_context() -> None:
    assert completeness_feature(FULL, "ctx_word_recall") > 0.9
    assert completeness_feature(ONE_FACT, "ctx_word_recall") < 0.5
    # "original" is a context word (statement 2), but this sentence restates nothing.
    borrowed = completeness_feature(ONE_FACT + ADDED_CLAIM, "ctx_word_recall")
    assert borrowed == completeness_feature(ONE_FACT, "ctx_word_recall")


def test_a_claim_the_context_never_mentions_is_the_least_grounded_sentence() -> None:
    assert completeness_feature(FULL, "grounding_min") >= 0.5
    assert completeness_feature(FULL + ADDED_CLAIM, "grounding_min") < 0.2


def test_a_tangent_brings_words_nothing_else_in_the_exchange_uses() -> None:
    def cohesion(response: str) -> float:
        question = Question("output_relevance", "no_tangents", "", response, QUERY)
        [evidence] = gather(load_encoder("minilm"), [question]).values()
        return evidence.features["cohesion_min"]

    # TANGENT is FULL plus a sentence about the Eiffel Tower, which shares no word with the rest.
    assert cohesion(FULL) > 0.1
    assert cohesion(TANGENT) == 0.0


def test_a_broken_accurate_and_focused_quotes_the_least_grounded_sentence() -> None:
    question = Question("completeness", "accurate_and_focused", "", FULL, QUERY, tuple(CONTEXT))
    [evidence] = gather(load_encoder("minilm"), [question]).values()
    # Every sentence is close to the context by embeddings, but one uses none of its words.
    evidence.notes.update(ctx_offtopic_sentences="", unsupported_sentences="")
    evidence.notes["least_grounded_sentence"] = "Shoppers adore the generous policy."
    evidence.features["grounding_min"] = 0.0
    broken = explain("accurate_and_focused", evidence, 0.2)
    assert "does not support: 'Shoppers adore the generous policy.'" in broken
    assert "Shoppers" not in explain("accurate_and_focused", evidence, 0.8)


async def test_missing_context_statements_are_quoted() -> None:
    [result] = await run([completeness(ONE_FACT)])
    entries = result["completeness"]["instructions_list"]
    assert isinstance(entries, list)
    # no_omissions is the instruction that names omitted context (key_information judges
    # whether the *key* statements are there, and is lenient on a one-fact answer).
    checks = [i.check for i in DETECTORS["completeness"].instructions]
    omissions = entries[checks.index("no_omissions")]
    assert not omissions["label"]
    assert "missing:" in omissions["explanation"]
    assert "Sale items are final" in omissions["explanation"]


async def test_one_encoder_call_per_request() -> None:
    encoder = CountingEncoder()
    judge = EmbeddedJudge(encoder=encoder)
    items = parse_items([completeness(FULL), completeness(ONE_FACT), relevance(OFF_TOPIC)])
    questions = [
        q for item in items for name in item.config for q in questions_for(item, DETECTORS[name])
    ]
    answers = await judge.answer(questions)
    assert encoder.calls == 1
    assert len(answers) == len(questions) == 8 + 8 + 4


def test_identical_input_gives_identical_verdicts() -> None:
    judge = EmbeddedJudge()
    [item] = parse_items([completeness(FULL)])
    questions = questions_for(item, DETECTORS["completeness"])
    assert judge.answer_sync(questions) == judge.answer_sync(questions)


def test_a_tangent_late_in_a_long_answer_is_read_like_one_early_in_it() -> None:
    # The judge once read only an answer's first 60 sentences: two tangents after them were
    # never seen, and no_tangents said every sentence stayed with the query's subject.
    on_topic = [
        f"Our return policy lets you return item {i} within 30 days of purchase." for i in range(60)
    ]
    tangents = [
        "Bananas are rich in potassium and grow in warm tropical climates.",
        "You should invest all your savings in cryptocurrency today.",
    ]
    verdicts = []
    for sentences in (tangents + on_topic, on_topic + tangents):
        result = assay.detect(" ".join(sentences), user_query="What is your return policy?")
        verdicts.append(result.output_relevance["instructions_list"][2])  # no_tangents
    assert [v["label"] for v in verdicts] == [False, False]
    assert all("Bananas" in v["explanation"] for v in verdicts)


def test_an_answer_longer_than_the_judge_reads_is_refused_not_cut() -> None:
    judge = EmbeddedJudge()
    long_answer = " ".join(f"Item {i} can be returned within 30 days." for i in range(1001))
    items = parse_items([relevance(long_answer), relevance("Returns are accepted for 30 days.")])
    questions = [q for item in items for q in questions_for(item, DETECTORS["output_relevance"])]
    answers = judge.answer_sync(questions)
    refused, judged = answers[:4], answers[4:]
    assert all(isinstance(a, JudgeFailure) and a.kind == "input_too_long" for a in refused)
    assert "generated_text has 1,001 sentences" in str(refused[0])
    assert all(not isinstance(a, JudgeFailure) for a in judged)  # its neighbour is judged
    many_statements = [
        " ".join(f"Branch {i} opens at 9 am." for i in range(doc * 10, doc * 10 + 10))
        for doc in range(100)
    ] + ["Branch 1000 opens at 10 am."]
    [item] = parse_items([{**completeness("Branches open at 9 am."), "context": many_statements}])
    answers = judge.answer_sync(questions_for(item, DETECTORS["completeness"]))
    assert all(isinstance(a, JudgeFailure) and a.kind == "input_too_long" for a in answers)
    assert "context has 1,001 sentences" in str(answers[0])


def test_an_html_answer_gets_the_verdicts_of_the_text_it_renders() -> None:
    judge = EmbeddedJudge()
    html = (
        "<p>You can get a refund on online orders within <b>30 days</b> of delivery.</p>"
        "<ul><li>Items bought on sale are final &amp; cannot be refunded.</li>"
        "<li>Shipping fees are not refunded unless the item arrived damaged.</li></ul>"
    )
    text = (
        "You can get a refund on online orders within 30 days of delivery.\n"
        "Items bought on sale are final & cannot be refunded.\n"
        "Shipping fees are not refunded unless the item arrived damaged."
    )
    answers = []
    for response in (html, text):
        [item] = parse_items([completeness(response)])
        answers.append(judge.answer_sync(questions_for(item, DETECTORS["completeness"])))
    assert answers[0] == answers[1]


def test_shipped_calibration_covers_every_check_with_its_features() -> None:
    calibration = load_calibration()
    assert set(calibration.checks) == set(CHECK_FEATURES)
    assert calibration.encoder == "minilm"


def test_calibration_fitted_on_other_features_is_rejected() -> None:
    data = {
        "encoder": "minilm",
        "checks": {
            check: {
                "features": ["q_resp"],
                "mean": [0.0],
                "scale": [1.0],
                "weights": [1.0],
                "bias": 0.0,
            }
            for check in CHECK_FEATURES
        },
    }
    with pytest.raises(ValueError, match="refit"):
        parse(data)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "The first point is here. A second point follows!",
            ["The first point is here.", "A second point follows!"],
        ),
        (
            "Use a tool, e.g. a wrench. Then tighten it well.",
            ["Use a tool, e.g. a wrench.", "Then tighten it well."],
        ),
        (
            "- ripe apples are red\n- ripe bananas are yellow",
            ["ripe apples are red", "ripe bananas are yellow"],
        ),
        ("Short. This sentence is long enough.", ["Short. This sentence is long enough."]),
        ("It costs 3.5 dollars in total today.", ["It costs 3.5 dollars in total today."]),
        # ! and ? inside brackets end nothing (the spec's completeness example).
        (
            "He co-founded Viaweb (later renamed Yahoo! Store), a web store builder. "
            "Then he started Y Combinator.",
            [
                "He co-founded Viaweb (later renamed Yahoo! Store), a web store builder.",
                "Then he started Y Combinator.",
            ],
        ),
        # Markdown layout states nothing: headings and table rules go, a table row's cells are
        # read as one line, a fenced code block is a unit of its own, "Step 2:" is a marker.
        (
            "## Setup\nThe VPN client must be installed first.\n## Login\nSign in with your ID.",
            ["The VPN client must be installed first.", "Sign in with your ID."],
        ),
        (
            "| Plan | Price |\n|---|:---:|\n| Basic plan | 9 dollars a month |",
            ["Plan, Price Basic plan, 9 dollars a month"],  # a short row is glued like a sentence
        ),
        (
            "Run this command in a terminal:\n```bash\ndmesg -w\n```\nIt follows the log.",
            ["Run this command in a terminal:", "dmesg -w", "It follows the log."],
        ),
        (
            "Step 1: Unplug the router for a while.\nStep 2) Plug the router back in.",
            ["Unplug the router for a while.", "Plug the router back in."],
        ),
        # An emoji or a capital of another alphabet starts a sentence too.
        (
            "Keep the receipt with you 🧾. 💸 Refunds take five days. Ёлки are sold out now.",
            [
                "Keep the receipt with you 🧾.",
                "💸 Refunds take five days.",
                "Ёлки are sold out now.",
            ],
        ),
        # Titles, initials, name suffixes, a.m./p.m. before a day or time and a month before its
        # day end nothing; a letter or a.m. before a new sentence still does.
        (
            "Dr. Smith and Prof. Jones led the trial. Martin Luther King Jr. Day is a holiday. "
            "It opens at 9 a.m. Monday to Friday, except holidays.",
            [
                "Dr. Smith and Prof. Jones led the trial.",
                "Martin Luther King Jr. Day is a holiday.",
                "It opens at 9 a.m. Monday to Friday, except holidays.",
            ],
        ),
        (
            "The bridge was designed by John A. Roebling in 1867. It opens at 9 a.m. The fee "
            "rises on Jan. 5 every year. We chose option B. The fee is lower there.",
            [
                "The bridge was designed by John A. Roebling in 1867.",
                "It opens at 9 a.m.",
                "The fee rises on Jan. 5 every year.",
                "We chose option B.",
                "The fee is lower there.",
            ],
        ),
        # A time zone after p.m. continues the sentence ("the 3 p.m. Eastern cutoff").
        (
            "Wires sent after the 3 p.m. Eastern cutoff go out the next day. Doors open at 7 p.m. "
            "The show starts at 8 p.m. Pacific time.",
            [
                "Wires sent after the 3 p.m. Eastern cutoff go out the next day.",
                "Doors open at 7 p.m.",
                "The show starts at 8 p.m. Pacific time.",
            ],
        ),
    ],
)
def test_sentence_splitting(text: str, expected: list[str]) -> None:
    assert split_sentences(text) == expected


@pytest.mark.parametrize(
    ("html", "expected"),
    [
        (
            "<h2>Setup</h2><p>Install the VPN client <em>first</em>.</p><br>Sign in &amp; wait.",
            ["Install the VPN client first.", "Sign in & wait."],
        ),
        (
            "<table><tr><th>Plan</th><th>Price</th></tr>"
            "<tr><td>Basic plan</td><td>9 dollars a month</td></tr></table>",
            ["Plan, Price Basic plan, 9 dollars a month"],
        ),
        (
            "Run this command in a terminal:<pre><code>dmesg -w</code></pre><p>It follows the log.</p>",
            ["Run this command in a terminal:", "dmesg -w", "It follows the log."],
        ),
        # Without a closing tag or <br> it is not HTML: a comparison in prose stays whole.
        ("If a <b and c> d holds, stop here.", ["If a <b and c> d holds, stop here."]),
    ],
)
def test_html_is_read_as_the_text_it_renders(html: str, expected: list[str]) -> None:
    assert split_sentences(from_html(html)) == expected


@pytest.mark.parametrize(
    ("sentence", "share"),
    [
        ("I think I think I think.", 1.0),
        ("It was very very very good.", 0.5),
        ("It was very very good.", 0.0),
        ("New York is not New Jersey.", 0.0),
        ("A /24 prefix is the mask 255.255.255.0.", 0.0),
        ("", 0.0),
    ],
)
def test_looped_share_counts_words_in_a_phrase_said_three_times_running(
    sentence: str, share: float
) -> None:
    assert looped_share(sentence) == pytest.approx(share)


def test_long_pairs_are_cut_before_tokenizing_without_changing_the_input() -> None:
    # Two long texts without a sentence break: the tokenizer built every overflowing window of
    # the pair (8 GB for two 100,000-character texts). The cut keeps every token the model reads.
    tokenizer = load_tokenizer(MAX_TOKENS)
    statement = "returns are accepted within thirty days " * 700
    sentence = "items can be returned for a refund " * 700
    whole = tokenizer.encode(statement, sentence)
    cut = tokenizer.encode(leading(statement), leading(sentence))
    assert cut.ids == whole.ids and len(cut.ids) == MAX_TOKENS
    assert len(cut.overflowing) < len(whole.overflowing) / 100
    assert (
        leading("A short sentence.\nIt stays as written.")
        == "A short sentence.\nIt stays as written."
    )
    model = load_agreement_model()
    long_pair = model.predict([(statement, sentence)])
    assert np.array_equal(long_pair, model.predict([(leading(statement), leading(sentence))]))


def test_agreement_model_file_must_match_its_pinned_sha256(tmp_path: Path) -> None:
    fake = tmp_path / "agreement.onnx"
    fake.write_bytes(b"not a model")
    with pytest.raises(ModelFileError, match="expected"):
        AgreementModel(fake)


def test_agreement_weights_rebuilt_from_changed_residuals_are_refused(tmp_path: Path) -> None:
    shipped = Path(str(resources.files("assay.judges.embedded").joinpath(MODEL_FILE)))
    (tmp_path / MODEL_FILE).write_bytes(shipped.read_bytes())
    packed = dict(np.load(shipped.with_name(RESIDUALS_FILE), allow_pickle=False))
    packed["residual_5"] = packed["residual_5"] + np.int8(1)
    np.savez_compressed(tmp_path / RESIDUALS_FILE, **packed)
    with pytest.raises(ModelFileError, match="do not match their pinned sha256"):
        AgreementModel(tmp_path / MODEL_FILE)


def test_packed_agreement_weights_are_rebuilt_byte_for_byte() -> None:
    shipped = Path(str(resources.files("assay.judges.embedded").joinpath(RESIDUALS_FILE)))
    assert hashlib.sha256(rebuild_weights(shipped)).hexdigest() == WEIGHTS_SHA256


def test_agreement_graphs_compute_in_float() -> None:
    """A graph that quantises its activations per call answers differently on different CPUs
    (by up to 0.027 between AVX-512 VNNI and AVX2); the packed graphs, shipped and
    cross-fitted, dequantise their int8 weights instead. Op types are plain strings in the file."""
    shipped = Path(str(resources.files("assay.judges.embedded").joinpath(MODEL_FILE)))
    bench_models = Path(__file__).resolve().parent.parent / "bench" / "models"
    graphs = [shipped, *sorted(bench_models.glob(f"*/{MODEL_FILE}"))]
    assert len(graphs) == 6
    for graph in graphs:
        data = graph.read_bytes()
        assert b"MatMul" in data
        assert b"DynamicQuantizeLinear" not in data, graph
        assert b"MatMulInteger" not in data, graph


def test_agreement_answers_are_the_pinned_ones_on_this_cpu() -> None:
    """Pinned on an AVX-512 VNNI host. The float graph answers within about 1e-7 of these on an
    AVX2 one (checked under qemu's EPYC-Rome model); the int8 graph it replaced moved them by up
    to 0.027, so CI on another kind of CPU would catch a graph that depends on the CPU again."""
    museum = "The museum opens at 9 am every day except Monday."
    tickets = "Tickets cost 12 euros for adults and 6 euros for children under twelve."
    pairs = [
        (museum, "The museum opens at 9 am."),
        (museum, "The museum does not open at 9 am."),
        (museum, "It opens at 11 pm on Mondays."),
        (tickets, "Adults pay 16 euros."),
        (tickets, "Bananas are rich in potassium."),
    ]
    pinned = [
        [0.169651, 0.821127, 0.009222],
        [0.040624, 0.956284, 0.003092],
        [0.328431, 0.503781, 0.167788],
        [0.518236, 0.446976, 0.034788],
        [0.058114, 0.011795, 0.930091],
    ]
    assert np.allclose(load_agreement_model().predict(pairs), pinned, rtol=0, atol=1e-5)


def test_agreement_answers_do_not_depend_on_worker_threads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pairs = [
        ("The museum opens at 9 am every day except Monday.", sentence)
        for sentence in (
            "The museum opens at 9 am.",
            "It is closed on Mondays.",
            "The museum does not open at 9 am.",
            "Tickets cost 12 euros for adults and 6 euros for children under twelve.",
            "Bananas are rich in potassium.",
        )
    ]
    answers = []
    for threads in ("1", "2", "3"):
        monkeypatch.setenv("ASSAY_THREADS", threads)
        answers.append(AgreementModel().predict(pairs))
    assert np.array_equal(answers[0], answers[1])
    assert np.array_equal(answers[0], answers[2])


def test_a_negation_is_read_as_a_contradiction_and_a_restatement_is_not() -> None:
    model = load_agreement_model()
    statement = "The museum opens at 9 am every day except Monday."
    negated_text = "The museum does not open at 9 am every day except Monday."
    negated, unrelated = model.predict(
        [
            (statement, negated_text),
            (statement, "Bananas are rich in potassium and are picked green."),
        ]
    )
    supported, contradicted, neither = (LABELS.index(x) for x in LABELS)
    assert negated[contradicted] > negated[supported]
    assert unrelated.argmax() == neither
    # The model alone takes any copy for an edit (it was trained on edited copies), so a pair
    # that differs in no negation, number, name or opposite is never read as a contradiction.
    assert may_conflict(statement, negated_text)
    assert may_conflict(statement, "The museum opens at 11 am every day except Monday.")
    assert not may_conflict(statement, statement)
    assert not may_conflict(statement, "Every day except Monday the museum opens at 9 am.")


def test_not_x_said_as_the_opposite_of_x_is_no_conflict() -> None:
    # From a walkthrough: "No, the spa is closed on Mondays" contradicted "The spa does not
    # open on Mondays" (p 0.19), so the right answer scored as the wrong one.
    statement = "The spa does not open on Mondays."
    assert not may_conflict(statement, "No, the spa is closed on Mondays.")
    assert may_conflict(statement, "Yes, the spa is open on Mondays.")
    required = "A passport photo is not required for the renewal form."
    assert not may_conflict(required, "A passport photo is optional for the renewal form.")
    assert may_conflict(required, "A passport photo is required for the renewal form.")
    assert not may_conflict("The spa is closed on Mondays.", "The spa is not open on Mondays.")
    assert may_conflict("The spa is closed on Mondays.", "The spa is not closed on Mondays.")
    # Both sides using both words of an opposite pair swap nothing: the issue's own correct
    # answer, reordered, was read as contradicting its context.
    hours = "The museum opens at 9 am and closes at 6 pm, every day except Monday."
    reordered = "The museum opens at 9 am every day except Monday, and it closes at 6 pm."
    assert not may_conflict(hours, reordered, directed=True)
    assert may_conflict(hours, "The museum closes at 9 am every day except Monday.", True)


def test_a_sentence_stating_less_than_its_statement_is_no_conflict() -> None:
    # From the hand-written support cases: "DVDs are loaned for 1 week." failed
    # faithful_interpretation against "Books are loaned for 3 weeks and DVDs for 1 week."
    # because the statement's "3" and "Books" are not in the sentence and the model read the pair
    # as contradicted. Read from the context to the answer, the sentence changes nothing.
    statement = "Books are loaned for 3 weeks and DVDs for 1 week."
    assert not may_conflict(statement, "DVDs are loaned for 1 week.", directed=True)
    assert may_conflict(statement, "DVDs are loaned for 2 weeks.", directed=True)
    assert may_conflict(statement, "The library loans Games for 1 week.", directed=True)
    assert may_conflict(statement, "DVDs are not loaned for 1 week.", directed=True)
    # Two sentences of one answer have no such order: either may have changed the other.
    assert may_conflict(statement, "DVDs are loaned for 1 week.")


def test_a_figure_the_context_states_elsewhere_opens_no_pair_in_a_joining_sentence() -> None:
    # From the hand-written support cases: "Yes, but meeting rooms aren't included in the $30 day
    # pass; they cost $20 per hour." failed no_contradiction against "Meeting rooms are not
    # included and cost $20 per hour.": the model read the pass's $30, which another statement
    # gives, as a changed figure.
    context = "A day pass costs $30. Meeting rooms are not included and cost $20 per hour."
    statement = "Meeting rooms are not included and cost $20 per hour."
    known = known_words(context)
    joined = "Yes, but meeting rooms aren't included in the $30 day pass; they cost $20 per hour."
    assert may_conflict(statement, joined, directed=True)
    assert not may_conflict(statement, joined, directed=True, known=known)
    # A figure the context does not state still opens the pair, as does a known figure in a
    # sentence that says nothing more than its statement (a changed copy).
    assert may_conflict(statement, joined.replace("$30", "$35"), directed=True, known=known)
    changed = "Meeting rooms are not included and cost $30 per hour."
    assert may_conflict(statement, changed, directed=True, known=known)
    # Names are not passed over: a name swapped for another of the context's is an edit.
    rooms = "The Oak room seats 8. The Elm room seats 12."
    assert may_conflict(
        "The Oak room seats 8.",
        "Book ahead: the Elm room seats 8.",
        directed=True,
        known=known_words(rooms),
    )


def test_a_figure_written_as_words_is_that_figure() -> None:
    context = "The family suite sleeps up to four guests and has two bathrooms."
    known = known_words(context)
    assert T.with_digits("twenty-five days, Thirty five, one of them") == "25 days, 35, one of them"
    # A right digit-for-word rewrite was a changed number, and a wrong number word passed.
    right = "The family suite sleeps up to 4 guests and has 2 bathrooms."
    wrong = "The family suite sleeps up to six guests and has two bathrooms."
    assert context_conflicts([context], [right], np.ones((1, 1)), known) == []
    [conflict] = context_conflicts([context], [wrong], np.ones((1, 1)), known)
    assert conflict.kind == "number"
    # The answer's 4 and 2 are figures the context gives (so no invented figure); an answer's
    # own number words are not read as figures ("two main types" counts its points).
    assert T.numbers(right) == {"4", "2"} <= T.numbers(context, plain=True)
    assert T.numbers(wrong) == set()


def test_a_name_swapped_for_another_name_of_the_context_is_a_conflict() -> None:
    # Damaged copies that put another of the context's names in a restated sentence were read
    # as agreeing (a name the context states anywhere was never a substitution).
    statements = [
        "The Harbour Hotel serves breakfast in its Lantern restaurant from 7 am.",
        "The hotel also runs the Quay restaurant, open for dinner from 6 pm.",
    ]
    known = known_words(" ".join(statements))
    swapped = "The Harbour Hotel serves breakfast in its Quay restaurant from 7 am."
    [conflict] = context_conflicts(statements[:1], [swapped], np.ones((1, 1)), known)
    assert conflict.kind == "name"
    moved = "The Harbour Hotel serves breakfast in its Lantern restaurant from 6 am."
    [conflict] = context_conflicts(statements[:1], [moved], np.ones((1, 1)), known)
    assert conflict.kind == "number"
    # The context's "2 weeks" makes "2" a known figure; a changed unit next to it is a change.
    weeks = ["Refunds are processed within 2 weeks of the return."]
    known = known_words(weeks[0])
    days = "Refunds are processed within 2 days of the return."
    [conflict] = context_conflicts(weeks, [days], np.ones((1, 1)), known)
    assert conflict.kind == "number"
    same = "Refunds are processed within 14 days of the return."
    assert context_conflicts(weeks, [same], np.ones((1, 1)), known) == []
    # Names compare without a possessive or plural "s"; other words keep theirs.
    assert {"nazi", "news"} <= known_words("Why prosecute former Nazi's? It is in the news.")
    assert "new" not in known_words("It is in the news.")
    question = "Why have former Nazi's been prosecuted so late?"
    answer = "Former Nazis have been prosecuted so late for several reasons."
    assert context_conflicts([question], [answer], np.ones((1, 1)), known_words(question)) == []
    # A sentence that joins the two statements says more than either: no substitution.
    joined = "The Harbour Hotel serves breakfast in its Quay restaurant and dinner from 6 pm."
    known = known_words(" ".join(statements))
    assert context_conflicts(statements[:1], [joined], np.ones((1, 1)), known) == []


async def test_a_paraphrase_of_the_context_is_no_contradiction() -> None:
    [result] = await run([completeness(FULL)])
    entries = result["completeness"]["instructions_list"]
    assert isinstance(entries, list)
    checks = [i.check for i in DETECTORS["completeness"].instructions]
    for check in ("faithful_interpretation", "no_contradiction"):
        entry = entries[checks.index(check)]
        assert entry["label"], entry["explanation"]
        assert "contradicts" not in entry["explanation"]


def test_one_agreement_model_call_per_request() -> None:
    calls: list[int] = []

    class Counting:
        def __init__(self) -> None:
            self.inner = load_agreement_model()

        def predict(self, pairs: Sequence[tuple[str, str]]) -> object:
            calls.append(len(pairs))
            return self.inner.predict(pairs)

    judge = EmbeddedJudge(agreement=Counting())  # type: ignore[arg-type]
    items = parse_items([completeness(FULL), completeness(ONE_FACT), relevance(OFF_TOPIC)])
    questions = [
        q for item in items for name in item.config for q in questions_for(item, DETECTORS[name])
    ]
    judge.answer_sync(questions)
    assert len(calls) == 1 and calls[0] > 0


def test_self_pairs_that_cannot_conflict_are_not_read() -> None:
    # A self pair is read for its contradiction alone, which counts only where the two sentences
    # may conflict; the rest are skipped, and reading them anyway changes no feature.
    same = "The museum opens at 9 am every day except Monday."
    reworded = "Every day except Monday the museum opens at 9 am."
    changed = "The museum opens at 11 am every day except Monday."
    sentences = [same, reworded, changed]
    sims = np.full((3, 3), 0.9, dtype=np.float32)
    pairs = C.self_pairs(sentences, sims)
    assert set(pairs) == {(same, changed), (reworded, changed)}
    every = [(same, reworded), *pairs]
    answers = dict(zip(every, load_agreement_model().predict(every), strict=True))
    read = C.features([], sentences, [], pairs, answers, {})[0]
    all_read = C.features([], sentences, [], every, answers, {})[0]
    assert read == all_read and read["self_contra_max"] > 0


async def test_output_relevance_does_not_read_or_refuse_for_the_context() -> None:
    # It reads only the query and the answer, yet a long context made it fail as
    # input_too_long (and cost encoding every context sentence).
    long_context = " ".join(f"Document line {i} says the router is blue." for i in range(1100))
    item = {
        "user_query": "What colour is the router?",
        "generated_text": "The router is blue.",
        "config": {"output_relevance": {}},
        "must_compute": "ignore_failures",
    }
    [with_context], [without] = await run([{**item, "context": [long_context]}]), await run([item])
    assert with_context["output_relevance"] == without["output_relevance"]
    both_config = {"output_relevance": {}, "completeness": {}}
    [both] = await run([{**item, "context": [long_context], "config": both_config}])
    assert both["output_relevance"] == without["output_relevance"]
    assert both["completeness"]["kind"] == "input_too_long"
