"""A price is compared with its currency.

From a hand-made example (DEVELOPERS.md, "Figures with their currency"): against "Admission is
15 euros, free for children under 12.", the answer "Tickets cost 12 euros." passed both
contradiction checks, because "12" is a figure of the statement (an age).
"""

from __future__ import annotations

from assay.judges.base import Question
from assay.judges.embedded.agreement import _Tokens, known_words, may_conflict
from assay.judges.embedded.encoder import load_encoder
from assay.judges.embedded.judge import gather

STATEMENT = "Admission is 15 euros, free for children under 12."
QUERY = "How much are tickets?"
CONTEXT = (
    "The museum is open Tuesday to Sunday from 10 am to 6 pm.",
    STATEMENT,
    "Guided tours start at 11 am and last 90 minutes.",
)


def test_a_figure_carries_the_currency_written_beside_it() -> None:
    tokens = _Tokens.of("It costs $15, or 12 euros, EUR 4, £3 and 6 GBP; under 5 dollars for 2.")
    figures = [
        (token, unit)
        for token, unit in zip(tokens.low, tokens.units, strict=True)
        if token[0].isdigit()
    ]
    assert figures == [
        ("15", "usd"), ("12", "eur"), ("4", "eur"), ("3", "gbp"), ("6", "gbp"), ("5", "usd"),
        ("2", ""),
    ]  # fmt: skip
    # Words are never priced.
    assert set(tokens.units[: tokens.low.index("15")]) == {""}


def test_the_context_knows_its_prices_in_their_currency() -> None:
    known = known_words(STATEMENT + " Parking costs $5.")
    assert {"15", "12", "15|eur", "|eur", "5|usd", "|usd"} <= known
    assert "12|eur" not in known
    # Figures given besides the context (the asker's, those worked out) count in any currency.
    assert "7|*" in known_words(STATEMENT, figures={"7"})


def test_a_price_is_not_restated_by_the_same_figure_in_another_sense() -> None:
    known = known_words(" ".join(CONTEXT))
    # "12" is the statement's age limit, not a price: the pair is open.
    assert may_conflict(STATEMENT, "Tickets cost 12 euros.", directed=True, known=known)
    # The statement's own price, or its figure without a currency, opens nothing.
    assert not may_conflict(STATEMENT, "Tickets cost 15 euros.", directed=True, known=known)
    assert not may_conflict(STATEMENT, "Tickets are 15.", directed=True, known=known)
    assert not may_conflict(STATEMENT, "Kids under 12 get in free.", directed=True, known=known)


def features(answer: str) -> dict[str, float]:
    question = Question("completeness", "faithful_interpretation", "", answer, QUERY, CONTEXT)
    [evidence] = gather(load_encoder("minilm"), [question]).values()
    return evidence.features


def test_a_price_changed_to_another_figure_of_the_statement_is_a_changed_number() -> None:
    right = features("Tickets cost 15 euros, and children under 12 get in free.")
    wrong = features("Tickets cost 12 euros, and children under 12 get in free.")
    assert right["ctx_conflict_number"] == 0.0
    assert wrong["ctx_conflict_number"] > 0.0
    # Said without the currency, the right price is still no conflict.
    assert features("Tickets are 15, and children under 12 go free.")["ctx_conflict_number"] == 0.0


def test_the_wrong_price_fails_both_contradiction_checks_and_the_right_one_passes() -> None:
    from assay import Client

    def labels(answer: str) -> dict[str, bool]:
        [result] = Client().inference.detect(
            body=[
                {
                    "user_query": QUERY,
                    "generated_text": answer,
                    "context": list(CONTEXT),
                    "config": {"completeness": {"detector_name": "default"}},
                }
            ]
        )
        return {
            i["instruction"]: i["label"]
            for i in result["completeness"]["instructions_list"]
            if "contradict" in i["instruction"] or "incorrect" in i["instruction"]
        }

    right = labels("Tickets cost 15 euros, and children under 12 get in free.")
    wrong = labels("Tickets cost 12 euros, and children under 12 get in free.")
    assert len(right) == 2 and all(right.values())
    assert not any(wrong.values())
