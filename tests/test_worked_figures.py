"""An answer that adds up what the documents price: its total is no changed number.

From the hand-written support cases (`bench/rag_cases.py`): correct answers such as "£22 per
tyre plus the £10 run-flat surcharge, so £32 per tyre" failed faithful_interpretation and
no_contradiction, the total read as a changed figure of each statement it draws on.
"""

from __future__ import annotations

from assay.judges.base import Question
from assay.judges.embedded import arithmetic as AR
from assay.judges.embedded import text as T
from assay.judges.embedded.agreement import may_conflict
from assay.judges.embedded.encoder import load_encoder
from assay.judges.embedded.judge import gather

QUERY = "How much is fitting for my four 19-inch run-flat tyres?"
CONTEXT = (
    "Fitting is £15 per tyre for wheels up to 18 inches and £22 per tyre for 19 inches and above.",
    "Run-flat tyres carry a £10 surcharge per tyre.",
    "Wheel alignment costs £45 and takes about 40 minutes.",
)
RIGHT = (
    "Fitting for 19-inch wheels is £22 per tyre, plus the £10 run-flat surcharge, so £32 per "
    "tyre, which comes to £128 in total for four."
)
# 15 + 19 is 34: a figure the context's numbers make, but not from those the answer names.
WRONG = (
    "Fitting for 19-inch wheels is £22 per tyre, plus the £10 run-flat surcharge, so £34 per "
    "tyre, which comes to £136 in total for four."
)


def test_a_computing_sentence_is_told_by_its_words() -> None:
    assert AR.computes("That comes to $70 altogether.")
    assert AR.computes("Day pass $30 plus 2 x $20 for the room.")
    assert AR.computes("So £32 per tyre, £128 in total.")
    assert not AR.computes("Fitting is £22 per tyre for 19-inch wheels.")


def test_figures_follow_in_one_or_two_steps() -> None:
    given = {"22", "10", "4", "30", "2", "20", "100", "12"}
    assert AR.derived({"32", "128", "70", "12.5"}, given) == {"32", "70"}
    assert AR.derived({"9"}, {"22", "10"}) == set()
    # A figure the context gives is no worked-out one.
    assert AR.derived({"22"}, {"22", "10"}) == set()


def test_only_figures_the_answer_names_are_operands() -> None:
    given = T.numbers(" ".join(CONTEXT), plain=True) | T.numbers(QUERY, plain=True)
    assert AR.worked_out([RIGHT], given, QUERY) == {"32", "128"}
    # 34 = 15 + 19 from the context, but the answer named 22 and 10: not worked out.
    assert AR.worked_out([WRONG], given, QUERY) == set()
    # The same total in a sentence that does not say it computes is not worked out either.
    assert AR.worked_out(["Fitting is £32 per tyre."], given, QUERY) == set()


def test_settled_figures_open_no_context_pair() -> None:
    statement = CONTEXT[1]
    sentence = "With the £10 surcharge that makes £32 per tyre."
    assert may_conflict(statement, sentence, directed=True)
    assert not may_conflict(statement, sentence, directed=True, settled=frozenset({"32"}))
    # A negation still opens the pair, settled figures or not.
    denied = "Run-flat tyres do not carry a surcharge, so fitting makes £32 per tyre."
    assert may_conflict(statement, denied, directed=True, settled=frozenset({"32"}))


def features(answer: str) -> dict[str, float]:
    question = Question("completeness", "faithful_interpretation", "", answer, QUERY, CONTEXT)
    [evidence] = gather(load_encoder("minilm"), [question]).values()
    return evidence.features


def test_a_right_total_is_no_conflict_and_a_wrong_one_still_is() -> None:
    right, wrong = features(RIGHT), features(WRONG)
    assert right["ctx_conflict_number"] == 0.0
    assert right["unstated_number_share"] == 0.0
    assert right["restated_contra_max"] < 0.5
    # The wrong total is still a figure nobody gave, and a changed one.
    assert wrong["unstated_number_share"] > 0.0
    assert wrong["ctx_conflict_number"] > 0.0 or wrong["restated_contra_max"] >= 0.5


def test_a_figure_against_its_unit_is_no_invented_one() -> None:
    # Read by its first digits, "10am" stated a 1 that no document gives.
    context = ("The Riverside branch opens at 10 a.m. and closes at 6 p.m. on weekdays.",)
    answer = "Riverside opens at 10am on weekdays."
    query = "When does the Riverside branch open?"
    question = Question("completeness", "accurate_and_focused", "", answer, query, context)
    [evidence] = gather(load_encoder("minilm"), [question]).values()
    assert evidence.features["unstated_number_share"] == 0.0


def test_the_askers_own_figures_are_no_changed_ones() -> None:
    context = (
        "Unused items can be returned within 30 days of delivery; sale items within 14 days.",
        "Refunds are issued to the original payment method within 5 working days.",
    )
    query = "I got a sale jumper 10 days ago. Can I still send it back?"
    answer = (
        "Yes, sale items can be returned within 14 days of delivery, so at 10 days you're in time."
    )
    question = Question("completeness", "no_contradiction", "", answer, query, context)
    [evidence] = gather(load_encoder("minilm"), [question]).values()
    assert evidence.features["ctx_conflict_number"] == 0.0
    assert evidence.features["unstated_number_share"] == 0.0
    # A figure the asker did not give still opens the pair.
    changed = answer.replace("14 days", "21 days")
    question = Question("completeness", "no_contradiction", "", changed, query, context)
    [evidence] = gather(load_encoder("minilm"), [question]).values()
    assert (
        evidence.features["ctx_conflict_number"] > 0.0
        or evidence.features["unstated_number_share"] > 0.0
    )
